//! The REST API (`/v1`, JSON) and `/metrics`: provisioning, session control,
//! policy reload, network state, health and monitoring. Generic over
//! [`Control`], the operations the node provides, so the HTTP layer is
//! tested on its own. Routes are listed once ([`route_table`]) and the
//! OpenAPI document is checked against that list. The operator console
//! (`/`, `/console/...`, see [`console`]) is served beside them.

pub mod access_log;
pub mod auth;
pub mod browser;
pub mod cluster;
pub mod config;
pub mod console;
pub mod debug;
pub mod error;
pub mod extract;
pub mod http_stats;
pub mod memory;
pub mod network;
pub mod notifications;
pub mod openapi;
pub mod policy;
pub mod profile;
pub mod server;
pub mod sessions;
pub mod stats;
pub mod status;
pub mod subscribers;
pub mod usage;
pub mod usage_file;

pub use crate::control::{
    BatchOutcome, Control, ControlError, ReauthOutcome, ReleaseCause, ReleaseOutcome, ReloadError,
    SessionFilter,
};
pub use crate::http_listener::ConnectionLimits;
pub use config::{ApiConfig, ApiTls};
pub use server::{serve, serve_tls, serve_with};

use axum::extract::DefaultBodyLimit;
use axum::http::Method;
use axum::middleware::from_fn_with_state;
use axum::routing::{delete, get, patch, post, put, MethodRouter};
use axum::{Extension, Router};
use std::sync::Arc;

/// One route: method, path (axum and OpenAPI spell templates alike), and
/// whether it is reachable without the token.
struct Route<C: Control> {
    method: Method,
    path: &'static str,
    public: bool,
    /// Bodies up to `[api].max_batch_bytes` instead of `max_body_bytes`.
    batch: bool,
    /// Compiles a policy script: one of [`policy::DRAFTS_AT_ONCE`].
    compiles: bool,
    handler: MethodRouter<Arc<C>>,
}

fn r<C: Control>(method: Method, path: &'static str, handler: MethodRouter<Arc<C>>) -> Route<C> {
    Route {
        method,
        path,
        public: false,
        batch: false,
        compiles: false,
        handler,
    }
}

fn routes<C: Control>() -> Vec<Route<C>> {
    vec![
        Route {
            batch: true,
            ..r(
                Method::POST,
                "/v1/subscribers/batch",
                post(subscribers::put_batch::<C>),
            )
        },
        r(
            Method::PUT,
            "/v1/subscribers/{imsi}",
            put(subscribers::put::<C>),
        ),
        r(
            Method::GET,
            "/v1/subscribers/{imsi}",
            get(subscribers::get::<C>),
        ),
        r(
            Method::DELETE,
            "/v1/subscribers/{imsi}",
            delete(subscribers::delete::<C>),
        ),
        r(
            Method::GET,
            "/v1/subscribers",
            get(subscribers::search::<C>),
        ),
        r(Method::GET, "/v1/sessions", get(sessions::list::<C>)),
        r(Method::GET, "/v1/sessions/{id}", get(sessions::get::<C>)),
        r(
            Method::DELETE,
            "/v1/sessions/{id}",
            delete(sessions::release::<C>),
        ),
        r(
            Method::POST,
            "/v1/sessions/{id}/reauth",
            post(sessions::reauth::<C>),
        ),
        Route {
            compiles: true,
            ..r(Method::POST, "/v1/policy/reload", post(policy::reload::<C>))
        },
        r(Method::GET, "/v1/policy", get(policy::running::<C>)),
        // A script may be larger than an ordinary body.
        Route {
            batch: true,
            compiles: true,
            ..r(Method::PUT, "/v1/policy", put(policy::deploy::<C>))
        },
        r(
            Method::GET,
            "/v1/policy/versions",
            get(policy::versions::<C>),
        ),
        r(
            Method::GET,
            "/v1/policy/versions/{id}",
            get(policy::version::<C>),
        ),
        r(
            Method::GET,
            "/v1/policy/versions/{a}/diff/{b}",
            get(policy::diff::<C>),
        ),
        r(
            Method::POST,
            "/v1/policy/rollback/{id}",
            post(policy::rollback::<C>),
        ),
        // A usage file may be larger than an ordinary body.
        Route {
            batch: true,
            ..r(Method::PUT, "/v1/usage", put(usage_file::deploy::<C>))
        },
        r(
            Method::GET,
            "/v1/usage/versions",
            get(usage_file::versions::<C>),
        ),
        r(
            Method::GET,
            "/v1/usage/versions/{id}",
            get(usage_file::version::<C>),
        ),
        r(
            Method::GET,
            "/v1/usage/versions/{a}/diff/{b}",
            get(usage_file::diff::<C>),
        ),
        r(
            Method::POST,
            "/v1/usage/rollback/{id}",
            post(usage_file::rollback::<C>),
        ),
        // A canary's script may be larger than an ordinary body.
        Route {
            batch: true,
            compiles: true,
            ..r(
                Method::POST,
                "/v1/policy/rollout",
                post(policy::start_rollout::<C>),
            )
        },
        r(
            Method::PATCH,
            "/v1/policy/rollout",
            patch(policy::widen_rollout::<C>),
        ),
        Route {
            compiles: true,
            ..r(
                Method::POST,
                "/v1/policy/rollout/promote",
                post(policy::promote_rollout::<C>),
            )
        },
        Route {
            compiles: true,
            ..r(
                Method::POST,
                "/v1/policy/rollout/abort",
                post(policy::abort_rollout::<C>),
            )
        },
        Route {
            batch: true,
            compiles: true,
            ..r(Method::POST, "/v1/policy/check", post(policy::check::<C>))
        },
        Route {
            batch: true,
            compiles: true,
            ..r(Method::POST, "/v1/policy/test", post(policy::test::<C>))
        },
        Route {
            batch: true,
            compiles: true,
            ..r(
                Method::POST,
                "/v1/policy/dry-run",
                post(policy::dry_run::<C>),
            )
        },
        r(Method::GET, "/v1/stats", get(stats::get::<C>)),
        r(
            Method::GET,
            "/v1/subscribers/{imsi}/usage",
            get(usage::get::<C>),
        ),
        r(
            Method::GET,
            "/v1/subscribers/{imsi}/sessions",
            get(sessions::of_subscriber::<C>),
        ),
        r(
            Method::GET,
            "/v1/subscribers/{imsi}/decisions",
            get(sessions::decisions::<C>),
        ),
        r(
            Method::POST,
            "/v1/subscribers/{imsi}/topup",
            post(usage::topup::<C>),
        ),
        r(
            Method::POST,
            "/v1/subscribers/{imsi}/usage/reset",
            post(usage::reset::<C>),
        ),
        r(
            Method::PUT,
            "/v1/cells/{cell}/congestion",
            put(network::put_cell::<C>),
        ),
        Route {
            public: true,
            ..r(Method::GET, "/v1/health", get(status::health))
        },
        r(Method::GET, "/v1/ready", get(status::ready::<C>)),
        r(
            Method::GET,
            "/v1/notifications/status",
            get(notifications::status::<C>),
        ),
        r(Method::GET, "/v1/config", get(status::config::<C>)),
        r(Method::GET, "/v1/cluster", get(cluster::get::<C>)),
        r(
            Method::POST,
            "/v1/debug/query-profiler",
            post(debug::switch::<C>),
        ),
        r(Method::GET, "/v1/debug/queries", get(debug::queries::<C>)),
        r(Method::GET, "/v1/debug/profile", get(profile::profile)),
        r(Method::GET, "/v1/debug/memory", get(memory::memory)),
        r(
            Method::GET,
            "/v1/openapi.json",
            get(openapi::serve_document),
        ),
        r(Method::GET, "/metrics", get(status::metrics::<C>)),
    ]
}

/// Every route as (method, path, public): what the router serves and what
/// the OpenAPI document must describe.
pub fn route_table<C: Control>() -> Vec<(Method, &'static str, bool)> {
    routes::<C>()
        .into_iter()
        .map(|r| (r.method, r.path, r.public))
        .collect()
}

/// The whole API over `ctl`. The caller checks `cfg.validate()` and logs
/// `cfg.warnings()` at start-up.
pub fn router<C: Control>(ctl: Arc<C>, cfg: &ApiConfig) -> Router {
    let http = Arc::new(http_stats::HttpStats::default());
    let drafts = Arc::new(tokio::sync::Semaphore::new(policy::DRAFTS_AT_ONCE));
    let mut protected = Router::new();
    let mut public = Router::new();
    for mut route in routes::<C>() {
        if route.batch {
            // Inner to the router-wide limit below, so it wins for this route.
            route.handler = route
                .handler
                .layer(DefaultBodyLimit::max(cfg.max_batch_bytes));
        }
        if route.compiles {
            route.handler = route
                .handler
                .layer(from_fn_with_state(drafts.clone(), policy::one_of_few));
        }
        if route.public {
            public = public.route(route.path, route.handler);
        } else {
            protected = protected.route(route.path, route.handler);
        }
    }
    if let Some(token) = &cfg.token {
        let token = auth::Token(Arc::from(token.as_bytes()));
        protected = protected.route_layer(from_fn_with_state(token, auth::require_token));
    }
    protected
        .merge(public)
        .merge(console::router())
        .fallback(error::no_route)
        .method_not_allowed_fallback(error::wrong_method)
        .layer(DefaultBodyLimit::max(cfg.max_body_bytes))
        .layer(Extension(http.clone()))
        .layer(from_fn_with_state(cfg.browser_rules(), browser::guard))
        .layer(from_fn_with_state(http, access_log::log_request))
        .with_state(ctl)
}
