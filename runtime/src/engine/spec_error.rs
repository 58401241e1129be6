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

/// Most characters of a caller's bad value quoted back in an error message. Why: a refusal
/// should show what was wrong, not mirror a 10 KB value into every answer, log line and
/// terminal that prints it.
pub const ECHOED_VALUE_CHARS_MAX: usize = 64;

/// `value` quoted for an error message (`"abc"`), cut after [`ECHOED_VALUE_CHARS_MAX`]
/// characters with a note of its full length (`"aaa…" (10240 characters)`).
pub fn echo(value: &str) -> String {
    let chars = value.chars().count();
    if chars <= ECHOED_VALUE_CHARS_MAX {
        return format!("{value:?}");
    }
    let kept: String = value.chars().take(ECHOED_VALUE_CHARS_MAX).collect();
    format!("{:?} ({chars} characters)", format!("{kept}…"))
}

#[cfg(test)]
mod echo_tests {
    use super::*;

    #[test]
    fn echoed_values_are_cut_past_the_limit() {
        let exact = "a".repeat(ECHOED_VALUE_CHARS_MAX);
        assert_eq!(echo(&exact), format!("\"{exact}\""));
        let long = "b".repeat(ECHOED_VALUE_CHARS_MAX + 1);
        let shown = echo(&long);
        assert_eq!(
            shown,
            format!("\"{}…\" (65 characters)", "b".repeat(ECHOED_VALUE_CHARS_MAX))
        );
        assert_eq!(echo("x\u{1b}"), "\"x\\u{1b}\"");
    }
}
