//! The rdmaprobe command line: the entry alone (the commands are in `cli`).

mod cli;

use clap::Parser as _;
use rdmaprobe::probe::ProbeError;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Output into a closed pipe (`rdmaprobe suite | head`) ends the process quietly, as it does
    // a C tool, instead of a panic in println!. Sockets are unaffected: Rust's std sends with
    // MSG_NOSIGNAL, so a peer that goes away is still an EPIPE error we report.
    // SAFETY: restores the default disposition of one signal before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    match cli::Cli::try_parse() {
        Ok(c) => exit_status(c.run()),
        Err(e) => parse_error(e),
    }
}

/// clap's refusal of the command line, said by clap; a perftest flag rdmaprobe does not take is
/// said with what to use instead (exit 2).
fn parse_error(e: clap::Error) -> ExitCode {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() == ErrorKind::UnknownArgument {
        if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
            if let Some(hint) = cli::perftest_hint(arg) {
                eprintln!("rdmaprobe: error: {hint}");
                return ExitCode::from(2);
            }
        }
    }
    e.exit()
}

/// The exit status of a command's result: its own, or for an error 2 (bad arguments) or 1,
/// said with its causes; a run stopped by a signal exits as the shell's status for it.
fn exit_status(r: anyhow::Result<ExitCode>) -> ExitCode {
    match r {
        Ok(code) => code,
        // stopped by a signal: the run unwound and gave everything back; the status is the
        // shell's for that signal (SIGPIPE, a closed output: quietly), 1 for SIGINT
        Err(_) if rdmaprobe::signals::signal() == Some(libc::SIGPIPE) => ExitCode::from(128 + libc::SIGPIPE as u8),
        Err(e) => {
            let usage = matches!(e.downcast_ref::<ProbeError>(), Some(ProbeError::Usage(_)));
            eprintln!("rdmaprobe: error: {}", cli::chain(e.as_ref()));
            match rdmaprobe::signals::signal() {
                Some(s @ (libc::SIGTERM | libc::SIGHUP)) => ExitCode::from(128 + s as u8),
                _ => ExitCode::from(if usage { 2 } else { 1 }),
            }
        }
    }
}
