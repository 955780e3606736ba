//! Which requests reach etcd: a pure decision on the method and the path.

use hyper::Method;

/// The one path scrapers ask for, and the only one forwarded.
pub const METRICS_PATH: &str = "/metrics";
/// The methods answered on [`METRICS_PATH`], as the `Allow` header of a 405 lists them.
pub const ALLOWED_METHODS: &str = "GET, HEAD";

/// What to do with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Ask the upstream's `/metrics`.
    Forward,
    /// 404: the path is not exactly [`METRICS_PATH`].
    NotFound,
    /// 405: [`METRICS_PATH`] with a method other than GET or HEAD.
    MethodNotAllowed,
}

/// The route of `method` on `path` (the request's path without its query). The path is compared
/// as sent: no normalisation, so `/metrics/../health` or `//metrics` is not `/metrics`.
pub fn route(method: &Method, path: &str) -> Route {
    if path != METRICS_PATH {
        Route::NotFound
    } else if method == Method::GET || method == Method::HEAD {
        Route::Forward
    } else {
        Route::MethodNotAllowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_and_head_of_metrics_are_forwarded() {
        assert_eq!(route(&Method::GET, "/metrics"), Route::Forward);
        assert_eq!(route(&Method::HEAD, "/metrics"), Route::Forward);
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS] {
            assert_eq!(
                route(&method, "/metrics"),
                Route::MethodNotAllowed,
                "{method}"
            );
        }
    }

    #[test]
    fn every_other_path_is_not_found_whatever_the_method() {
        for path in [
            "/",
            "",
            "*",
            "/health",
            "/version",
            "/v3/kv/range",
            "/debug/pprof/",
            "/metrics/",
            "/metrics/../health",
            "//metrics",
            "/METRICS",
            "/metrics%2F",
        ] {
            for method in [Method::GET, Method::HEAD, Method::POST] {
                assert_eq!(route(&method, path), Route::NotFound, "{method} {path:?}");
            }
        }
    }
}
