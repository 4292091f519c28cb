//! The operator console: HTML shells and their scripts and style sheet,
//! served at `/` and `/console/...` on the API's listener and embedded in
//! the binary (nothing is fetched at run time). The shells carry no data:
//! every number and name on a page comes from the `/v1` JSON API, which
//! the page's script calls with the bearer token the operator typed (kept
//! in the tab's sessionStorage, sent as `Authorization: Bearer`, never a
//! cookie). So the shells and assets are public like `/v1/health`, and
//! the data stays behind the token.
//!
//! Every console response carries a strict Content-Security-Policy: only
//! this origin's scripts, styles and API, no inline script, no framing.
//! The scripts build the DOM with `textContent` (never `innerHTML` with
//! data), so a subscriber attribute holding markup shows as text.
//! docs/console.md says why the stack is this small.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The Content-Security-Policy of every console response.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

/// A page: its path, title, and script.
struct Page {
    path: &'static str,
    title: &'static str,
    script: &'static str,
}

const PAGES: [Page; 4] = [
    Page {
        path: "/",
        title: "Dashboard",
        script: "dashboard.js",
    },
    Page {
        path: "/console/subscribers",
        title: "Subscribers",
        script: "subscriber.js",
    },
    Page {
        path: "/console/policy",
        title: "Policy",
        script: "policy.js",
    },
    Page {
        path: "/console/peers",
        title: "Peers",
        script: "peers.js",
    },
];

/// The embedded assets: name, content type, bytes.
const ASSETS: [(&str, &str, &str); 7] = [
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("console.css"),
    ),
    ("common.js", JS, include_str!("common.js")),
    ("charts.js", JS, include_str!("charts.js")),
    ("dashboard.js", JS, include_str!("dashboard.js")),
    ("subscriber.js", JS, include_str!("subscriber.js")),
    ("policy.js", JS, include_str!("policy.js")),
    ("peers.js", JS, include_str!("peers.js")),
];

const JS: &str = "text/javascript; charset=utf-8";

/// The console's routes (public: they hold no data).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut r = Router::new();
    for (i, page) in PAGES.iter().enumerate() {
        r = r.route(page.path, get(move || async move { shell(i) }));
    }
    r.route("/console/assets/{name}", get(asset))
}

/// The headers every console response carries.
fn secured(body: impl IntoResponse, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The HTML of page `index`: navigation, an empty main element the
/// page's script fills, the token form. Only constant text goes in.
fn shell(index: usize) -> Response {
    let Some(page) = PAGES.get(index) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut nav = String::new();
    for (i, p) in PAGES.iter().enumerate() {
        let current = if i == index {
            " aria-current=\"page\""
        } else {
            ""
        };
        nav.push_str(&format!("<a href=\"{}\"{current}>{}</a>", p.path, p.title));
    }
    let html = format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · PCRF console</title>
<link rel="stylesheet" href="/console/assets/console.css">
</head>
<body data-page="{title}">
<header>
<span class="brand">PCRF</span>
<nav>{nav}</nav>
<form id="token-form" class="token" autocomplete="off">
<input id="token" type="password" placeholder="API token" aria-label="API token">
<button type="submit">Use token</button>
<span id="token-state" class="muted"></span>
</form>
</header>
<main id="main"><h1>{title}</h1><p id="status" class="muted" role="status"></p></main>
<dialog id="confirm"><form method="dialog"><p id="confirm-text"></p><pre id="confirm-detail"></pre>
<menu><button value="cancel" id="confirm-cancel">Cancel</button><button value="ok" id="confirm-ok" class="danger">Confirm</button></menu></form></dialog>
<script src="/console/assets/common.js"></script>
<script src="/console/assets/charts.js"></script>
<script src="/console/assets/{script}"></script>
</body>
</html>
"#,
        title = page.title,
        script = page.script,
    );
    secured(html, "text/html; charset=utf-8")
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => secured(*body, content_type),
        None => secured(
            (StatusCode::NOT_FOUND, "no such asset"),
            "text/plain; charset=utf-8",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_script_is_an_asset_and_no_asset_has_inline_handlers() {
        for p in PAGES {
            assert!(
                ASSETS.iter().any(|(n, _, _)| *n == p.script),
                "{}",
                p.script
            );
        }
        for (name, _, body) in ASSETS {
            // Data goes into the DOM as text: innerHTML is never assigned.
            assert!(!body.contains("innerHTML"), "{name} uses innerHTML");
            assert!(!body.contains("outerHTML"), "{name} uses outerHTML");
            assert!(!body.contains("insertAdjacentHTML"), "{name}");
            assert!(!body.contains("document.write"), "{name}");
            assert!(!body.contains("eval("), "{name}");
        }
    }
}
