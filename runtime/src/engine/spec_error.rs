//! `SpecError`: a caller's mistake in an agent's spec, naming the field by its full path.
//!
//! [`super::agent::FieldError`] names fields with a `&'static str`; prompt templates and tools
//! live in maps and lists (`adapter.prompts.wakeup.timer`, `adapter.tools[2].parameters`), so
//! their paths are built at run time and need an owned string.

/// What is wrong with one field of a spec, and what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// Dotted path of the field at fault, as in the JSON body (`adapter.tools[2].name`).
    pub field: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl SpecError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError {
            field: field.into(),
            message: message.into(),
        }
    }
}
