//! `Endpoint`: where an outbound request goes, parsed from a URL an operator wrote in a spec or a
//! fleet file. A small parser of our own instead of the `url` crate: we accept far less than a
//! browser does (no user info, no query, no fragment, no percent-decoding games in the host), and
//! every refusal names what is wrong and shows a URL that would work.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A URL longer than this (in characters) is refused: no provider needs more, and the limit keeps
/// error messages and logs that quote it short.
pub const URL_CHARS_MAX: usize = 2_048;
/// The longest DNS name (in characters, without a trailing dot), RFC 1035.
pub const HOST_NAME_CHARS_MAX: usize = 253;
/// The longest label of a DNS name (in characters), RFC 1035.
pub const HOST_LABEL_CHARS_MAX: usize = 63;
/// The port of `http://` when the URL names none.
pub const HTTP_PORT_DEFAULT: u16 = 80;
/// The port of `https://` when the URL names none.
pub const HTTPS_PORT_DEFAULT: u16 = 443;

/// Shown in every refusal, so the operator sees the shape we expect.
const EXAMPLES: &str = "e.g. https://api.anthropic.com or http://localhost:11434/v1";

/// Whether the connection is wrapped in TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scheme {
    /// Plain HTTP: local model servers (Ollama, vLLM, llama.cpp) and the simulator.
    Http,
    /// HTTP over TLS (rustls): every hosted provider.
    Https,
}

impl Scheme {
    /// The port a URL of this scheme means when it names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => HTTP_PORT_DEFAULT,
            Scheme::Https => HTTPS_PORT_DEFAULT,
        }
    }

    /// The scheme as written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The host part of an endpoint; kept apart so TLS verifies the right kind of name and the
/// `Host` header brackets IPv6 addresses.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Host {
    /// A DNS name, lowercased; resolved with `tokio::net::lookup_host` at each connection.
    Name(String),
    /// An IPv4 literal.
    V4(Ipv4Addr),
    /// An IPv6 literal (written in brackets in the URL).
    V6(Ipv6Addr),
}

impl Host {
    /// The host as a resolver and a TLS server name take it: IPv6 without brackets.
    pub fn bare(&self) -> String {
        match self {
            Host::Name(name) => name.clone(),
            Host::V4(ip) => ip.to_string(),
            Host::V6(ip) => ip.to_string(),
        }
    }
}

impl fmt::Display for Host {
    /// The host as a URL and the `Host` header write it: IPv6 in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::V4(ip) => write!(f, "{ip}"),
            Host::V6(ip) => write!(f, "[{ip}]"),
        }
    }
}

/// A parsed `http://` or `https://` URL: scheme, host, port and an optional base path that every
/// request path is appended to (`http://localhost:11434/v1` + `/chat/completions`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    scheme: Scheme,
    host: Host,
    port: u16,
    /// Empty, or `/segment(/segment)*` without a trailing slash.
    base_path: String,
}

/// Why a URL is not an endpoint. Each message says what is wrong and shows a good URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("the URL is {chars} characters long, more than the {max} allowed; {EXAMPLES}", max = URL_CHARS_MAX)]
    TooLong { chars: usize },
    #[error("the URL contains a space or control character at character {at}; {EXAMPLES}")]
    BadCharacter { at: usize },
    #[error("the URL has no scheme: start it with https:// or http://; {EXAMPLES}")]
    MissingScheme,
    #[error("the URL's scheme `{scheme}` is not supported, only https:// and http://; {EXAMPLES}")]
    UnsupportedScheme { scheme: String },
    #[error("the URL has user info (`…@`); put credentials in a header (an API key setting), not in the URL; {EXAMPLES}")]
    UserInfo,
    #[error("the URL has a query (`?…`); give only scheme, host, port and base path; {EXAMPLES}")]
    Query,
    #[error(
        "the URL has a fragment (`#…`); give only scheme, host, port and base path; {EXAMPLES}"
    )]
    Fragment,
    #[error("the URL has no host; {EXAMPLES}")]
    EmptyHost,
    #[error("the URL's host `{host}` is not valid: {reason}; {EXAMPLES}")]
    BadHost { host: String, reason: &'static str },
    #[error(
        "the URL's port `{port}` is not valid: it must be a number from 1 to 65535; {EXAMPLES}"
    )]
    BadPort { port: String },
    #[error("the URL's path `{path}` is not valid: {reason}; {EXAMPLES}")]
    BadPath { path: String, reason: &'static str },
}

impl Endpoint {
    /// Parses `scheme://host[:port][/base/path]`. See `EndpointError` for what is refused.
    pub fn parse(url: &str) -> Result<Endpoint, EndpointError> {
        check_characters(url)?;
        let (scheme, rest) = split_scheme(url)?;
        if rest.contains('#') {
            return Err(EndpointError::Fragment);
        }
        if rest.contains('?') {
            return Err(EndpointError::Query);
        }
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(EndpointError::UserInfo);
        }
        let (host, port) = parse_authority(authority)?;
        Ok(Endpoint {
            scheme,
            host,
            port: port.unwrap_or(scheme.default_port()),
            base_path: parse_base_path(path)?,
        })
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host, as the URL named it.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The port: the URL's, or the scheme's default.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The base path every request path is appended to: empty or `/a/b`, never a trailing `/`.
    pub fn base_path(&self) -> &str {
        &self.base_path
    }

    /// What the `Host` header carries: the host, and the port when it is not the default.
    pub fn authority(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.to_string()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Endpoint {
    /// The endpoint as a URL (normalised: lowercase scheme and name, default port omitted).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}{}",
            self.scheme.as_str(),
            self.authority(),
            self.base_path
        )
    }
}

fn check_characters(url: &str) -> Result<(), EndpointError> {
    let chars = url.chars().count();
    if chars > URL_CHARS_MAX {
        return Err(EndpointError::TooLong { chars });
    }
    match url
        .chars()
        .position(|c| c.is_whitespace() || c.is_control())
    {
        Some(at) => Err(EndpointError::BadCharacter { at }),
        None => Ok(()),
    }
}

fn split_scheme(url: &str) -> Result<(Scheme, &str), EndpointError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(EndpointError::MissingScheme);
    };
    if scheme.eq_ignore_ascii_case("https") {
        Ok((Scheme::Https, rest))
    } else if scheme.eq_ignore_ascii_case("http") {
        Ok((Scheme::Http, rest))
    } else if scheme.is_empty() {
        Err(EndpointError::MissingScheme)
    } else {
        Err(EndpointError::UnsupportedScheme {
            scheme: scheme.to_string(),
        })
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn parse_authority(authority: &str) -> Result<(Host, Option<u16>), EndpointError> {
    if authority.is_empty() {
        return Err(EndpointError::EmptyHost);
    }
    if let Some(bracketed) = authority.strip_prefix('[') {
        return parse_bracketed(authority, bracketed);
    }
    if authority.matches(':').count() > 1 {
        return Err(bad_host(
            authority,
            "an IPv6 address must be in brackets, e.g. http://[::1]:8080",
        ));
    }
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    if host.is_empty() {
        return Err(EndpointError::EmptyHost);
    }
    Ok((parse_host(host)?, port.map(parse_port).transpose()?))
}

fn parse_bracketed(authority: &str, bracketed: &str) -> Result<(Host, Option<u16>), EndpointError> {
    let Some((inside, after)) = bracketed.split_once(']') else {
        return Err(bad_host(authority, "an opening `[` without a closing `]`"));
    };
    if inside.is_empty() {
        return Err(EndpointError::EmptyHost);
    }
    let ip: Ipv6Addr = inside.parse().map_err(|_| {
        bad_host(
            inside,
            "what is in brackets must be an IPv6 address, e.g. [::1]",
        )
    })?;
    let port = match after {
        "" => None,
        _ => match after.strip_prefix(':') {
            Some(port) => Some(parse_port(port)?),
            None => return Err(bad_host(authority, "only `:port` may follow `]`")),
        },
    };
    Ok((Host::V6(ip), port))
}

fn parse_port(port: &str) -> Result<u16, EndpointError> {
    let bad = || EndpointError::BadPort {
        port: port.to_string(),
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(bad()),
        Ok(port) => Ok(port),
    }
}

fn bad_host(host: &str, reason: &'static str) -> EndpointError {
    EndpointError::BadHost {
        host: host.to_string(),
        reason,
    }
}

/// An IPv4 literal, or a DNS name of letters, digits and hyphens.
fn parse_host(host: &str) -> Result<Host, EndpointError> {
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(Host::V4(ip));
    }
    let name = host.to_ascii_lowercase();
    if name.chars().count() > HOST_NAME_CHARS_MAX {
        return Err(bad_host(host, "a host name has at most 253 characters"));
    }
    for label in name.split('.') {
        check_label(host, label)?;
    }
    let last = name.rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad_host(
            host,
            "it looks like an IPv4 address but is not one (four numbers 0-255)",
        ));
    }
    Ok(Host::Name(name))
}

fn check_label(host: &str, label: &str) -> Result<(), EndpointError> {
    if label.is_empty() {
        return Err(bad_host(
            host,
            "a host name has no empty labels (`..`, or a leading or trailing `.`)",
        ));
    }
    if label.len() > HOST_LABEL_CHARS_MAX {
        return Err(bad_host(
            host,
            "a label of a host name has at most 63 characters",
        ));
    }
    if !label
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(bad_host(
            host,
            "a host name has only letters, digits, `-` and `.` (write international names in their xn-- form)",
        ));
    }
    if label.starts_with('-') || label.ends_with('-') {
        return Err(bad_host(
            host,
            "a label of a host name does not start or end with `-`",
        ));
    }
    Ok(())
}

/// Empty or `/a/b`: trailing slashes dropped; no empty, `.` or `..` segment; only characters a
/// URI path may hold, `%` followed by two hex digits.
fn parse_base_path(path: &str) -> Result<String, EndpointError> {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    check_path(trimmed).map_err(|reason| EndpointError::BadPath {
        path: path.to_string(),
        reason,
    })?;
    Ok(trimmed.to_string())
}

/// Checks a path that starts with `/`: segments that are neither empty, `.` nor `..`, made of
/// the characters RFC 3986 allows in a path segment. Shared with request paths.
pub(crate) fn check_path(path: &str) -> Result<(), &'static str> {
    let Some(segments) = path.strip_prefix('/') else {
        return Err("it must start with `/`");
    };
    for segment in segments.split('/') {
        match segment {
            "" => return Err("it has an empty segment (`//`)"),
            "." | ".." => return Err("it has a `.` or `..` segment"),
            _ => check_segment(segment)?,
        }
    }
    Ok(())
}

pub(crate) fn check_segment(segment: &str) -> Result<(), &'static str> {
    let bytes = segment.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let hex = bytes.get(at + 1..at + 3);
                if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                    return Err("a `%` must be followed by two hex digits");
                }
                at += 3;
            }
            b if is_path_byte(b) => at += 1,
            _ => return Err("it has a character a URL path may not hold (write it %-encoded)"),
        }
    }
    Ok(())
}

/// RFC 3986 `pchar` without `%`: unreserved, sub-delims, `:` and `@`.
fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(url: &str) -> Endpoint {
        Endpoint::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    fn err(url: &str) -> EndpointError {
        match Endpoint::parse(url) {
            Ok(endpoint) => panic!("{url} was accepted as {endpoint:?}"),
            Err(error) => error,
        }
    }

    #[test]
    fn default_ports_follow_the_scheme() {
        let https = ok("https://api.anthropic.com");
        assert_eq!(https.scheme(), Scheme::Https);
        assert_eq!(https.port(), 443);
        assert_eq!(https.host(), &Host::Name("api.anthropic.com".into()));
        assert_eq!(https.base_path(), "");
        assert_eq!(https.authority(), "api.anthropic.com");
        let http = ok("http://example.com");
        assert_eq!((http.scheme(), http.port()), (Scheme::Http, 80));
    }

    #[test]
    fn an_explicit_port_is_kept_and_shown_unless_it_is_the_default() {
        let local = ok("http://localhost:11434/v1");
        assert_eq!(local.port(), 11434);
        assert_eq!(local.authority(), "localhost:11434");
        assert_eq!(local.base_path(), "/v1");
        assert_eq!(local.to_string(), "http://localhost:11434/v1");
        assert_eq!(ok("https://h.example:443").authority(), "h.example");
        assert_eq!(ok("http://h.example:443").authority(), "h.example:443");
        assert_eq!(ok("http://h:65535").port(), 65535);
        assert_eq!(ok("http://h:1").port(), 1);
    }

    #[test]
    fn base_paths_lose_trailing_slashes_and_keep_the_rest() {
        assert_eq!(ok("https://h.example/").base_path(), "");
        assert_eq!(ok("https://h.example//").base_path(), "");
        assert_eq!(ok("https://h.example/v1/").base_path(), "/v1");
        assert_eq!(
            ok("https://h.example/a/b%2Fc/v1").base_path(),
            "/a/b%2Fc/v1"
        );
        assert_eq!(
            ok("https://h.example/openai/deployments/x:y@z").base_path(),
            "/openai/deployments/x:y@z"
        );
    }

    #[test]
    fn scheme_and_host_are_case_insensitive_and_normalised() {
        let endpoint = ok("HTTPS://API.Example.COM/V1");
        assert_eq!(endpoint.scheme(), Scheme::Https);
        assert_eq!(endpoint.host(), &Host::Name("api.example.com".into()));
        assert_eq!(endpoint.base_path(), "/V1", "paths are case-sensitive");
    }

    #[test]
    fn ip_literals_are_hosts() {
        let v4 = ok("http://127.0.0.1:8080");
        assert_eq!(v4.host(), &Host::V4(Ipv4Addr::LOCALHOST));
        let v6 = ok("http://[::1]:8080/v1");
        assert_eq!(v6.host(), &Host::V6(Ipv6Addr::LOCALHOST));
        assert_eq!((v6.port(), v6.base_path()), (8080, "/v1"));
        assert_eq!(v6.authority(), "[::1]:8080");
        assert_eq!(v6.host().bare(), "::1");
        let v6_default = ok("https://[2001:db8::7]");
        assert_eq!(
            (v6_default.port(), v6_default.authority().as_str()),
            (443, "[2001:db8::7]")
        );
    }

    #[test]
    fn scheme_refusals() {
        assert_eq!(err("api.anthropic.com"), EndpointError::MissingScheme);
        assert_eq!(err("://api.anthropic.com"), EndpointError::MissingScheme);
        assert_eq!(
            err("ftp://example.com"),
            EndpointError::UnsupportedScheme {
                scheme: "ftp".into()
            }
        );
        assert!(matches!(
            err("ws://h"),
            EndpointError::UnsupportedScheme { .. }
        ));
    }

    #[test]
    fn userinfo_query_and_fragment_are_refused() {
        assert_eq!(
            err("https://user:pw@api.example.com"),
            EndpointError::UserInfo
        );
        assert_eq!(
            err("https://user@api.example.com/v1"),
            EndpointError::UserInfo
        );
        assert_eq!(
            err("https://api.example.com/v1?key=x"),
            EndpointError::Query
        );
        assert_eq!(err("https://api.example.com?x"), EndpointError::Query);
        assert_eq!(err("https://api.example.com/#top"), EndpointError::Fragment);
    }

    #[test]
    fn empty_hosts_are_refused() {
        for url in ["https://", "https:///v1", "http://:8080", "http://[]:80"] {
            assert_eq!(err(url), EndpointError::EmptyHost, "{url}");
        }
    }

    #[test]
    fn bad_hosts_are_refused() {
        for url in [
            "http://exa mple.com",
            "http://exa_mple.com",
            "http://-bad.example",
            "http://bad-.example",
            "http://a..b",
            "http://.a",
            "http://a.",
            "http://1.2.3",
            "http://256.1.1.1",
            "http://::1",
            "http://[::1",
            "http://[not-v6]",
            "http://[::1]x",
            "http://é.example",
        ] {
            let error = err(url);
            assert!(
                matches!(
                    error,
                    EndpointError::BadHost { .. } | EndpointError::BadCharacter { .. }
                ),
                "{url}: {error:?}"
            );
        }
    }

    #[test]
    fn host_name_length_limits_hold_at_their_boundary() {
        let label = "a".repeat(HOST_LABEL_CHARS_MAX);
        ok(&format!("http://{label}.example"));
        let long_label = "a".repeat(HOST_LABEL_CHARS_MAX + 1);
        assert!(matches!(
            err(&format!("http://{long_label}.example")),
            EndpointError::BadHost { .. }
        ));
        // 4 labels of 63 + 3 dots = 255; trimming gives exactly 253.
        let name = [label.as_str(); 4].join(".");
        ok(&format!("http://{}", &name[..HOST_NAME_CHARS_MAX]));
        let over = &name[..HOST_NAME_CHARS_MAX + 1];
        assert!(
            matches!(
                err(&format!("http://{over}")),
                EndpointError::BadHost { .. }
            ),
            "{over}"
        );
    }

    #[test]
    fn bad_ports_are_refused() {
        for (url, port) in [
            ("http://h:", ""),
            ("http://h:0", "0"),
            ("http://h:65536", "65536"),
            ("http://h:-1", "-1"),
            ("http://h:+80", "+80"),
            ("http://h:8o", "8o"),
            ("http://[::1]:", ""),
            ("http://[::1]:99999", "99999"),
        ] {
            assert_eq!(
                err(url),
                EndpointError::BadPort { port: port.into() },
                "{url}"
            );
        }
    }

    #[test]
    fn bad_paths_are_refused() {
        for url in [
            "http://h/a//b",
            "http://h/a/../b",
            "http://h/./b",
            "http://h/a%2",
            "http://h/a%zz",
            "http://h/a\"b",
            "http://h/a<b>",
            "http://h/é",
        ] {
            assert!(matches!(err(url), EndpointError::BadPath { .. }), "{url}");
        }
    }

    #[test]
    fn spaces_and_control_characters_are_refused() {
        assert_eq!(
            err("https://h.example/a b"),
            EndpointError::BadCharacter { at: 19 }
        );
        assert_eq!(
            err(" https://h.example"),
            EndpointError::BadCharacter { at: 0 }
        );
        assert!(matches!(
            err("https://h\n.example"),
            EndpointError::BadCharacter { .. }
        ));
    }

    #[test]
    fn the_length_limit_holds_at_its_boundary() {
        let head = "https://h.example/";
        let fits = format!("{head}{}", "a".repeat(URL_CHARS_MAX - head.len()));
        assert_eq!(fits.chars().count(), URL_CHARS_MAX);
        ok(&fits);
        let over = format!("{fits}a");
        assert_eq!(
            err(&over),
            EndpointError::TooLong {
                chars: URL_CHARS_MAX + 1
            }
        );
    }

    #[test]
    fn every_refusal_shows_a_good_url() {
        for url in [
            "h",
            "ftp://h",
            "https://u@h",
            "https://h?q",
            "https://h#f",
            "https://",
            "http://h:0",
            "http://a..b",
            "http://h/a//b",
        ] {
            let message = err(url).to_string();
            assert!(
                message.contains("https://api.anthropic.com"),
                "{url}: {message}"
            );
        }
    }
}
