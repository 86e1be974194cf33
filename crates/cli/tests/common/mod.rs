//! What several integration tests share (each test binary that uses it declares
//! `mod common;`).

pub(crate) mod netns;
