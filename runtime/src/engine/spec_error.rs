//! `SpecError`: a caller's mistake in an agent's spec, naming the field by its full path. The
//! same type as [`super::agent::FieldError`], whose field is built at run time for the paths of
//! maps and lists (`adapter.prompts.wakeup.timer`, `adapter.tools[2].parameters`).

pub use super::agent::FieldError as SpecError;

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for SpecError {}
