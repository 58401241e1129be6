//! The web dashboard (docs/dashboard.md, ADR 0023): a few static files, embedded in the binary
//! and served at `/` by the same router as the API. They carry no tenant data: the page signs in
//! with the operator token and reads everything through `/v1`, so the files need no token.
//!
//! Served from the router's fallback (api/mod.rs), not as routes: the router registers only the
//! API's routes, each in the OpenAPI document (ADR 0017), and these files are not API.

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// One embedded file and the path it is served at.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

/// Every file of the dashboard. No other path is the dashboard's.
pub const ASSETS: [Asset; 9] = [
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("assets/index.html"),
    },
    // Sign-in, routing, the start
    Asset {
        path: "/dashboard/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/app.js"),
    },
    // Limits, the state, time and money
    Asset {
        path: "/dashboard/state.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/state.js"),
    },
    // Calls to /v1
    Asset {
        path: "/dashboard/api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/api.js"),
    },
    // The fleet table
    Asset {
        path: "/dashboard/fleet.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/fleet.js"),
    },
    // Loading and the event stream
    Asset {
        path: "/dashboard/live.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/live.js"),
    },
    // The agent view
    Asset {
        path: "/dashboard/agent.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/agent.js"),
    },
    Asset {
        path: "/dashboard/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/app.css"),
    },
    Asset {
        path: "/dashboard/icon.svg",
        content_type: "image/svg+xml",
        body: include_str!("assets/icon.svg"),
    },
];

/// The page may load only its own files and talk only to its own node: no inline script or
/// style, no other origin, no framing (the operator token is typed into it).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The files change only with the binary: a browser may keep them but must ask again (a cheap
/// 304 by `ETag`), so a new node's page is never mixed with an old script.
pub const CACHE_CONTROL: &str = "no-cache";

/// The answer for `method path` when `path` is a dashboard file; `None` for any other path.
pub fn answer(method: &Method, path: &str, headers: &HeaderMap) -> Option<Response> {
    let asset = ASSETS.iter().find(|asset| asset.path == path)?;
    if method != Method::GET && method != Method::HEAD {
        return Some(method_not_allowed());
    }
    let etag = etag(asset.body);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|sent| sent.as_bytes() == etag.as_bytes());
    // HEAD gets GET's answer: hyper sends its head only, with the body's length.
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        asset.body.into_response()
    };
    let set = response.headers_mut();
    set.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    set.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    set.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    set.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    set.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    set.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if let Ok(value) = HeaderValue::from_str(&etag) {
        set.insert(header::ETAG, value);
    }
    Some(response)
}

/// A strong validator of a file's bytes (the first 16 hex digits of its SHA-256).
fn etag(body: &str) -> String {
    let digest = Sha256::digest(body.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// The files are read-only: the API's error shape, with the methods they take.
fn method_not_allowed() -> Response {
    let mut response = crate::api::ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: "the dashboard's files are only read (GET, HEAD); see docs/dashboard.md".into(),
        field: None,
        retry_after_s: None,
    }
    .into_response();
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_served_with_its_type_and_the_policy() {
        for asset in ASSETS {
            let response = answer(&Method::GET, asset.path, &HeaderMap::new()).unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{}", asset.path);
            let headers = response.headers();
            assert_eq!(headers[header::CONTENT_TYPE], asset.content_type);
            assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
            let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(policy.starts_with("default-src 'none';"), "{policy}");
            assert!(!policy.contains("unsafe"), "{policy}");
        }
    }

    #[test]
    fn a_known_etag_gets_304_and_other_paths_are_not_the_dashboards() {
        let first = answer(&Method::GET, "/", &HeaderMap::new()).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_NONE_MATCH, first.headers()[header::ETAG].clone());
        let again = answer(&Method::GET, "/", &headers).unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert!(answer(&Method::GET, "/dashboard/", &HeaderMap::new()).is_none());
        assert!(answer(&Method::GET, "/index.html", &HeaderMap::new()).is_none());
        let post = answer(&Method::POST, "/", &HeaderMap::new()).unwrap();
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere_and_runs_no_inline_code() {
        let page = ASSETS[0].body;
        assert!(!page.contains("http://") && !page.contains("https://"));
        assert!(!page.contains("<script>") && !page.contains("style="));
        assert!(!page.contains("<style"));
        for asset in ASSETS {
            assert!(
                !asset.body.contains("https://"),
                "{} loads from elsewhere",
                asset.path
            );
        }
    }
}
