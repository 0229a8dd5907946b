//! The `wasmop` binary; everything lives in the library (`wasmop::cli`).

fn main() -> std::process::ExitCode {
    wasmop::cli::main()
}
