//! Exit codes: 2 for bad input, 1 for a run that broke.

use leanburn::runner::RunError;

/// A failure and the exit code it gets: 2 for bad input, 1 for a run that broke.
pub struct Failure {
    pub code: i32,
    pub message: String,
}

pub fn bad_input(message: impl Into<String>) -> Failure {
    Failure { code: 2, message: message.into() }
}

pub fn broke(message: impl Into<String>) -> Failure {
    Failure { code: 1, message: message.into() }
}

impl From<RunError> for Failure {
    fn from(err: RunError) -> Self {
        Failure { code: err.exit_code(), message: err.to_string() }
    }
}

/// A failure inside a data-parallel replica, which stops the other replicas.
impl From<Failure> for RunError {
    fn from(failure: Failure) -> Self {
        RunError::Job { message: failure.message, bad_input: failure.code == 2 }
    }
}

/// Prints a failure and exits with its code.
pub fn exit_on_failure(result: Result<(), Failure>) {
    if let Err(failure) = result {
        eprintln!("error: {}", failure.message);
        std::process::exit(failure.code);
    }
}
