//! Redaction: what keeps secrets out of everything the runtime writes for humans (transcripts,
//! and later logs). A [`Redactor`] knows the secret strings of one run (API keys read from the
//! environment, bearer tokens, values marked secret) and replaces every occurrence with
//! [`REDACTED`]; [`mask_auth_headers`] catches credentials it was never told about, in the
//! shapes HTTP headers give them (`Authorization: Bearer …`, `x-api-key: …`).

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Shortest secret a [`Redactor`] takes, in characters. Shorter "secrets" (an empty variable, a
/// placeholder such as `none` or `changeme`) would redact common words all over a transcript and
/// protect nothing: a real key or token is far longer.
pub const SECRET_CHARS_MIN: usize = 8;

/// Replaces known secret strings. Cheap to clone (the secrets are shared).
#[derive(Clone, Default)]
pub struct Redactor {
    /// Distinct secrets of at least `SECRET_CHARS_MIN` characters, in a stable order.
    secrets: Arc<[String]>,
}

impl std::fmt::Debug for Redactor {
    /// Never prints the secrets themselves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    /// A redactor for `secrets`; those shorter than [`SECRET_CHARS_MIN`] characters are ignored.
    pub fn new<S: Into<String>>(secrets: impl IntoIterator<Item = S>) -> Self {
        let mut kept: Vec<String> = secrets
            .into_iter()
            .map(Into::into)
            .filter(|s| s.chars().count() >= SECRET_CHARS_MIN)
            .collect();
        kept.sort();
        kept.dedup();
        Redactor {
            secrets: kept.into(),
        }
    }

    /// A redactor for the values of the environment variables `names` (through `lookup`, so
    /// tests need not touch the process environment); unset variables are skipped.
    pub fn from_env_vars(names: &[&str], lookup: impl Fn(&str) -> Option<String>) -> Self {
        Self::new(names.iter().filter_map(|name| lookup(name)))
    }

    /// How many secrets it redacts.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Whether it knows no secret (it still masks credentials in header shapes).
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every occurrence of a secret replaced by [`REDACTED`], then credentials in
    /// header shapes masked ([`mask_auth_headers`]). Overlapping or adjacent occurrences become
    /// one [`REDACTED`], so no piece of either secret survives.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let spans = merged(self.occurrences(text));
        let replaced = replace_spans(text, &spans);
        match mask_auth_headers(&replaced) {
            Cow::Borrowed(_) => replaced,
            Cow::Owned(masked) => Cow::Owned(masked),
        }
    }

    /// Redacts, in place, every string in `value`: values and object keys, at any depth.
    pub fn redact_json(&self, value: &mut Value) {
        match value {
            Value::String(text) => {
                if let Cow::Owned(redacted) = self.redact(text) {
                    *text = redacted;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| self.redact_json(item)),
            Value::Object(map) => {
                let fields = std::mem::take(map);
                for (key, mut field) in fields {
                    self.redact_json(&mut field);
                    map.insert(self.redact(&key).into_owned(), field);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Byte ranges of every occurrence of every secret, overlapping ones included.
    fn occurrences(&self, text: &str) -> Vec<(usize, usize)> {
        let mut spans = Vec::new();
        for secret in self.secrets.iter() {
            let mut from = 0;
            while let Some(found) = text[from..].find(secret.as_str()) {
                let start = from + found;
                spans.push((start, start + secret.len()));
                // Step one character, not the whole secret: "aaaaaaaa" in "aaaaaaaaa" matches twice.
                from = start + text[start..].chars().next().map_or(1, char::len_utf8);
            }
        }
        spans
    }
}

/// Sorted spans with overlapping and touching ones joined.
fn merged(mut spans: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    spans.sort_unstable();
    let mut joined: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match joined.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => joined.push((start, end)),
        }
    }
    joined
}

/// `text` with each (disjoint, sorted) span replaced by [`REDACTED`].
fn replace_spans<'a>(text: &'a str, spans: &[(usize, usize)]) -> Cow<'a, str> {
    if spans.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for &(start, end) in spans {
        out.push_str(&text[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

/// Header names whose value is a credential, lower case, and whether the value starts with an
/// authentication scheme (`Bearer`, `Basic`, `Token`) that stays readable.
const CREDENTIAL_HEADERS: &[(&str, bool)] = &[
    ("authorization", true),
    ("proxy-authorization", true),
    ("x-api-key", false),
    ("api-key", false),
];

/// Authentication schemes kept in front of a masked credential, lower case.
const AUTH_SCHEMES: &[&str] = &["bearer", "basic", "token"];

/// Masks credentials written the way HTTP headers carry them, in free text, JSON or a header
/// dump: `Authorization: Bearer sk-…` becomes `Authorization: Bearer [REDACTED]`, `x-api-key:
/// abc…` becomes `x-api-key: [REDACTED]` (names matched case-insensitively, with `:` or `=`
/// and optional quotes between name and value). An `Authorization` without a known scheme is
/// left alone ("authorization: required" is prose).
pub fn mask_auth_headers(text: &str) -> Cow<'_, str> {
    // One pass over the bytes, names compared ignoring ASCII case in place. Why not a
    // lower-cased copy searched once per name: every transcript line and answer goes through
    // here, and the copy and four searches were 1.5 % of a simulated fleet day.
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    for start in 0..bytes.len() {
        // Every name starts with `a`, `p` or `x`; `x-api-key` contains `api-key`, so only
        // whole names count.
        if !matches!(bytes[start].to_ascii_lowercase(), b'a' | b'p' | b'x')
            || (start > 0 && is_name_byte(bytes[start - 1]))
        {
            continue;
        }
        for &(name, needs_scheme) in CREDENTIAL_HEADERS {
            if starts_with_ignoring_case(&bytes[start..], name) {
                if let Some(span) = credential_after(text, start + name.len(), needs_scheme) {
                    spans.push(span);
                }
            }
        }
    }
    replace_spans(text, &merged(spans))
}

/// Whether `bytes` starts with `lower` (lower-case ASCII), ignoring ASCII case.
fn starts_with_ignoring_case(bytes: &[u8], lower: &str) -> bool {
    bytes
        .get(..lower.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(lower.as_bytes()))
}

fn is_name_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

/// The byte span of the credential following a header name that ends at `at`, if there is one.
fn credential_after(text: &str, at: usize, needs_scheme: bool) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut i = at;
    let skip_separators = |mut i: usize| {
        while i < bytes.len() && matches!(bytes[i], b'"' | b'\'' | b' ' | b'\t') {
            i += 1;
        }
        i
    };
    i = skip_separators(i);
    if i >= bytes.len() || !matches!(bytes[i], b':' | b'=') {
        return None;
    }
    i = skip_separators(i + 1);
    let scheme = AUTH_SCHEMES.iter().find(|s| {
        starts_with_ignoring_case(&bytes[i..], s) && bytes.get(i + s.len()) == Some(&b' ')
    });
    match scheme {
        Some(scheme) => i += scheme.len(),
        None if needs_scheme => return None,
        None => {}
    }
    while i < bytes.len() && bytes[i] == b' ' {
        i += 1;
    }
    let end = text[i..]
        .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | '}' | ')'))
        .map_or(text.len(), |n| i + n);
    (end > i).then_some((i, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_shorter_than_the_minimum_are_ignored_at_the_boundary() {
        let seven = "a".repeat(SECRET_CHARS_MIN - 1);
        let eight = "b".repeat(SECRET_CHARS_MIN);
        let redactor = Redactor::new([seven.clone(), eight.clone(), String::new()]);
        assert_eq!(redactor.len(), 1);
        assert_eq!(
            redactor.redact(&format!("{seven} {eight}")),
            format!("{seven} {REDACTED}")
        );
        // Characters, not bytes: eight two-byte characters are a secret.
        let wide = "é".repeat(SECRET_CHARS_MIN);
        assert_eq!(Redactor::new([wide.clone()]).len(), 1);
        assert_eq!(Redactor::new(["é".repeat(SECRET_CHARS_MIN - 1)]).len(), 0);
    }

    #[test]
    fn every_occurrence_is_replaced_including_at_the_edges() {
        let redactor = Redactor::new(["sk-live-123456"]);
        assert_eq!(
            redactor.redact("sk-live-123456 then sk-live-123456, sk-live-123456"),
            "[REDACTED] then [REDACTED], [REDACTED]"
        );
        assert_eq!(redactor.redact("sk-live-123456"), REDACTED);
        assert_eq!(redactor.redact("xsk-live-123456x"), "x[REDACTED]x");
        assert!(matches!(redactor.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn overlapping_and_adjacent_secrets_leave_no_piece_behind() {
        let redactor = Redactor::new(["abcdefgh12", "gh12345678"]);
        assert_eq!(redactor.redact("<abcdefgh12345678>"), "<[REDACTED]>");
        // One secret inside another.
        let nested = Redactor::new(["token-abcdefgh", "abcdefgh"]);
        assert_eq!(nested.redact("token-abcdefgh!"), "[REDACTED]!");
        // A secret overlapping itself.
        let runs = Redactor::new(["aaaaaaaa"]);
        assert_eq!(runs.redact("aaaaaaaaa b"), "[REDACTED] b");
        // Touching occurrences join.
        let two = Redactor::new(["11111111", "22222222"]);
        assert_eq!(two.redact("1111111122222222"), REDACTED);
    }

    #[test]
    fn multibyte_text_around_secrets_survives() {
        let redactor = Redactor::new(["clé-secrète-42"]);
        assert_eq!(
            redactor.redact("été clé-secrète-42 ünïcode"),
            "été [REDACTED] ünïcode"
        );
    }

    #[test]
    fn json_is_redacted_at_every_depth_keys_included() {
        let redactor = Redactor::new(["hunter2-secret"]);
        let mut value = json!({
            "a": ["x", {"b": "key=hunter2-secret"}],
            "hunter2-secret": 1,
            "n": 5,
            "t": true,
            "z": null,
        });
        redactor.redact_json(&mut value);
        assert_eq!(
            value,
            json!({
                "a": ["x", {"b": "key=[REDACTED]"}],
                "[REDACTED]": 1,
                "n": 5,
                "t": true,
                "z": null,
            })
        );
        assert!(!value.to_string().contains("hunter2"));
    }

    #[test]
    fn from_env_vars_skips_unset_variables() {
        let redactor = Redactor::from_env_vars(&["SET", "UNSET"], |name| {
            (name == "SET").then(|| "sk-from-env-123".to_string())
        });
        assert_eq!(redactor.len(), 1);
        assert_eq!(redactor.redact("key sk-from-env-123"), "key [REDACTED]");
        assert_eq!(format!("{redactor:?}"), "Redactor(1 secrets)");
    }

    #[test]
    fn header_shaped_credentials_are_masked() {
        assert_eq!(
            mask_auth_headers("Authorization: Bearer sk-abc.def\nnext"),
            "Authorization: Bearer [REDACTED]\nnext"
        );
        assert_eq!(
            mask_auth_headers(r#"{"authorization":"bearer abc123","x":1}"#),
            r#"{"authorization":"bearer [REDACTED]","x":1}"#
        );
        assert_eq!(
            mask_auth_headers("X-API-Key: k-123 and api-key=k-456;"),
            "X-API-Key: [REDACTED] and api-key=[REDACTED];"
        );
        assert_eq!(
            mask_auth_headers("curl -H 'Authorization: Basic dXNlcjpw'"),
            "curl -H 'Authorization: Basic [REDACTED]'"
        );
        assert_eq!(
            mask_auth_headers("é PROXY-AUTHORIZATION: TOKEN t-1 ✓ Api-Key=\"k-2\""),
            "é PROXY-AUTHORIZATION: TOKEN [REDACTED] ✓ Api-Key=\"[REDACTED]\""
        );
        // Prose, an empty value and a name inside another word stay.
        for text in [
            "authorization: required",
            "Authorization: Bearer ",
            "my-authorization: bearer abc",
            "my-x-api-keys are elsewhere",
            "x-api-key",
        ] {
            assert_eq!(mask_auth_headers(text), text);
        }
    }

    #[test]
    fn redact_masks_headers_too() {
        let redactor = Redactor::default();
        assert_eq!(
            redactor.redact("sent Authorization: Bearer t0k3n"),
            "sent Authorization: Bearer [REDACTED]"
        );
    }
}
