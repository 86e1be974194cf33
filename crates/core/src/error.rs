//! Errors returned to the application (the verbs-style calls). Bad input from the network is
//! never an error here: it is dropped and counted, or answered with the NAK the protocol
//! prescribes.

use thiserror::Error;

use crate::QpState;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    #[error("no such {0}")]
    NoSuchObject(&'static str),
    #[error("out of {0}: the configured bound is reached")]
    Exhausted(&'static str),
    #[error("{0} is full")]
    QueueFull(&'static str),
    #[error("queue pair in state {state:?} cannot {action}")]
    InvalidState {
        state: QpState,
        action: &'static str,
    },
}
