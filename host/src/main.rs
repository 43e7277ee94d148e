//! The `sluice` binary; everything lives in the library, [`sluice::cli`] first.

fn main() -> std::process::ExitCode {
    sluice::cli::main()
}
