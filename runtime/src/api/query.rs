//! Query strings with errors that name the parameter, and unknown parameters refused.

use super::error::ApiError;
use crate::engine::spec_error::echo;

/// The parameters of one query string.
#[derive(Debug)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Splits `raw` into pairs; a key outside `accepted` or given twice is an error.
    pub fn parse(raw: Option<&str>, accepted: &[&str]) -> Result<Query, ApiError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !accepted.contains(&key) {
                return Err(ApiError::invalid_field(
                    key,
                    format!(
                        "unknown query parameter {}; accepted: {}",
                        echo(key),
                        accepted.join(", ")
                    ),
                ));
            }
            if pairs.iter().any(|(k, _)| k == key) {
                return Err(ApiError::invalid_field(
                    key,
                    format!("query parameter {key:?} is given twice"),
                ));
            }
            pairs.push((key.to_string(), value.to_string()));
        }
        Ok(Query { pairs })
    }

    /// The raw value of `key`, if given.
    pub fn take(&mut self, key: &str) -> Option<String> {
        let index = self.pairs.iter().position(|(k, _)| k == key)?;
        Some(self.pairs.remove(index).1)
    }

    /// `key` as a number, if given.
    pub fn number(&mut self, key: &'static str) -> Result<Option<u64>, ApiError> {
        match self.take(key) {
            None => Ok(None),
            Some(raw) => raw.parse().map(Some).map_err(|_| {
                ApiError::invalid_field(
                    key,
                    format!("{key} must be a non-negative number, got {}", echo(&raw)),
                )
            }),
        }
    }

    /// `limit` within 1..=`max`, `default` when absent: a page's size.
    pub fn limit(&mut self, default: usize, max: usize) -> Result<usize, ApiError> {
        let Some(limit) = self.number("limit")? else {
            return Ok(default);
        };
        usize::try_from(limit)
            .ok()
            .filter(|l| (1..=max).contains(l))
            .ok_or_else(|| {
                ApiError::invalid_field(
                    "limit",
                    format!("limit must be between 1 and {max}, got {limit}"),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_repeated_and_malformed_parameters_name_their_key() {
        let err = Query::parse(Some("since=3"), &["after"]).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("since"));
        let err = Query::parse(Some("after=1&after=2"), &["after"]).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("after"));
        let mut q = Query::parse(Some("after=-1"), &["after"]).unwrap();
        assert_eq!(
            q.number("after").unwrap_err().field.as_deref(),
            Some("after")
        );
        let mut q = Query::parse(Some("after=7"), &["after", "limit"]).unwrap();
        assert_eq!(q.number("after").unwrap(), Some(7));
        assert_eq!(q.number("limit").unwrap(), None);
    }
}
