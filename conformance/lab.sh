# Sourced by the rxe-lab interop scripts: finds the lab (RXE_LAB, default ../shared/rxe-lab
# from the repo root) and where it keeps its image and share folder (RXE_LAB_DIR, default read
# from its vm.sh), and builds its image. Exits 0 with "SKIPPED" when the lab or root is
# missing, so the suite passes where the lab cannot run.
LAB=${RXE_LAB:-../shared/rxe-lab}
if [ ! -x "$LAB/vm.sh" ]; then echo "SKIPPED: no rxe-lab at $LAB"; exit 0; fi
LAB_DIR=${RXE_LAB_DIR:-$(sed -n 's/^LAB=\${RXE_LAB_DIR:-\(.*\)}$/\1/p' "$LAB/vm.sh")}
if [ "$(id -u)" != 0 ]; then echo "SKIPPED: the rxe-lab needs root"; exit 0; fi
"$LAB/build.sh"
