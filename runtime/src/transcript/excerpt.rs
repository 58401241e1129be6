//! Excerpts: text cut to a byte budget at a character boundary, with a visible mark, for the
//! final answer a run reports and for the bulky fields of a transcript.

/// Largest final answer kept whole, in bytes (32 KiB): enough for any answer a human reads in a
/// run view; a longer one keeps its beginning and [`TRUNCATION_MARK`].
pub const FINAL_ANSWER_EXCERPT_BYTES_MAX: usize = 32 * 1024;

/// Appended to a cut text so that a reader sees it was cut. Counted in the budget.
pub const TRUNCATION_MARK: &str = "…[truncated]";

/// A text cut to a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excerpt {
    /// At most the budget's bytes, ending in [`TRUNCATION_MARK`] when cut (if the mark fits).
    pub text: String,
    /// Whether anything was left out.
    pub truncated: bool,
}

/// `text` if it fits in `bytes_max` bytes; else its longest prefix, cut at a character
/// boundary, that fits together with [`TRUNCATION_MARK`]. A budget smaller than the mark
/// keeps a bare prefix.
pub fn excerpt(text: &str, bytes_max: usize) -> Excerpt {
    if text.len() <= bytes_max {
        return Excerpt {
            text: text.to_string(),
            truncated: false,
        };
    }
    let (room, mark) = match bytes_max.checked_sub(TRUNCATION_MARK.len()) {
        Some(room) => (room, TRUNCATION_MARK),
        None => (bytes_max, ""),
    };
    let cut = floor_char_boundary(text, room);
    Excerpt {
        text: format!("{}{mark}", &text[..cut]),
        truncated: true,
    }
}

/// The largest character boundary of `text` at or below `at` (`str::floor_char_boundary` is
/// not stable on our minimum Rust).
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: usize = FINAL_ANSWER_EXCERPT_BYTES_MAX;

    #[test]
    fn exactly_at_the_cap_is_kept_whole() {
        let text = "a".repeat(CAP);
        let kept = excerpt(&text, CAP);
        assert!(!kept.truncated);
        assert_eq!(kept.text, text);
    }

    #[test]
    fn one_byte_over_is_cut_and_marked_within_the_cap() {
        let text = "a".repeat(CAP + 1);
        let cut = excerpt(&text, CAP);
        assert!(cut.truncated);
        assert_eq!(cut.text.len(), CAP);
        assert!(cut.text.ends_with(TRUNCATION_MARK));
        assert_eq!(
            cut.text.len() - TRUNCATION_MARK.len(),
            CAP - TRUNCATION_MARK.len()
        );
    }

    #[test]
    fn a_multibyte_character_straddling_the_cut_is_left_out_whole() {
        // The cut falls at CAP - mark; put a 4-byte character across it.
        let room = CAP - TRUNCATION_MARK.len();
        let text = format!("{}🦀{}", "a".repeat(room - 2), "b".repeat(100));
        let cut = excerpt(&text, CAP);
        assert!(cut.truncated);
        assert_eq!(
            cut.text,
            format!("{}{TRUNCATION_MARK}", "a".repeat(room - 2))
        );
        assert!(cut.text.len() <= CAP);
        // Ending exactly before the character keeps it out too; ending after it keeps it.
        let fits = format!("{}🦀{}", "a".repeat(room - 4), "b".repeat(100));
        let cut = excerpt(&fits, CAP);
        assert_eq!(
            cut.text,
            format!("{}🦀{TRUNCATION_MARK}", "a".repeat(room - 4))
        );
    }

    #[test]
    fn a_budget_smaller_than_the_mark_keeps_a_bare_prefix() {
        let cut = excerpt("éééé", 3);
        assert_eq!(
            cut,
            Excerpt {
                text: "é".into(),
                truncated: true
            }
        );
        assert_eq!(
            excerpt("", 0),
            Excerpt {
                text: String::new(),
                truncated: false
            }
        );
    }
}
