//! The HTTP front: URL routing for the Kubernetes REST paths, query parameters, content types,
//! and JSON / `Status` responses. Everything is served by one fallback handler that parses the
//! path itself, because the set of resources changes at run time (CRDs).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::Value;

use crate::delete::{self, DeleteOptions, parse_propagation};
use crate::discovery;
use crate::error::ApiError;
use crate::eviction;
use crate::field_validation::{self, FieldValidation};
use crate::openapi;
use crate::patch::PatchKind;
use crate::state::State;
use crate::verbs::{self, ListOptions, Target, WriteOptions};
use crate::watch::{self, WatchOptions};

/// The axum router serving the stand-in.
pub fn router(state: Arc<State>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

fn json_response(code: u16, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error_response(e: &ApiError) -> Response {
    let mut resp = json_response(e.code, &e.status_body());
    if let Some(seconds) = e.retry_after_seconds()
        && let Ok(value) = header::HeaderValue::from_str(&seconds.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, value);
    }
    resp
}

fn text_response(text: &'static str) -> Response {
    let mut resp = Response::new(Body::from(text));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Query parameters (the last value of a repeated key wins, empty pairs are skipped).
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(uri: &Uri) -> Self {
        let q = uri.query().unwrap_or_default();
        Self(
            url::form_urlencoded::parse(q.as_bytes())
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }

    fn list_options(&self) -> Result<ListOptions, ApiError> {
        let limit = match self.get("limit") {
            Some(l) if !l.is_empty() => l
                .parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
            _ => 0,
        };
        Ok(ListOptions {
            label_selector: self.get("labelSelector").unwrap_or_default().to_string(),
            field_selector: self.get("fieldSelector").unwrap_or_default().to_string(),
            limit: limit.max(0),
            continue_token: self
                .get("continue")
                .filter(|c| !c.is_empty())
                .map(str::to_string),
            resource_version: self.get("resourceVersion").unwrap_or_default().to_string(),
            resource_version_match: self
                .get("resourceVersionMatch")
                .unwrap_or_default()
                .to_string(),
        })
    }

    /// Write options; `body` is the request body when it is the object itself (create,
    /// update), whose repeated keys `fieldValidation` reports.
    fn write_options(&self, body: Option<&[u8]>) -> Result<WriteOptions, ApiError> {
        Ok(WriteOptions {
            dry_run: self.get("dryRun") == Some("All"),
            field_manager: self.get("fieldManager").map(str::to_string),
            force: self.flag("force"),
            field_validation: FieldValidation::parse(self.get("fieldValidation"))?,
            duplicates: body
                .map(field_validation::duplicate_fields)
                .unwrap_or_default(),
            patched: false,
        })
    }

    fn delete_options(&self, body: &[u8]) -> Result<DeleteOptions, ApiError> {
        let mut opts = DeleteOptions::from_body(body)?;
        if let Some(p) = self.get("propagationPolicy") {
            opts.propagation = parse_propagation(p)?;
        }
        if let Some(g) = self.get("gracePeriodSeconds") {
            opts.grace_period_seconds =
                Some(g.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}"))
                })?);
        }
        if self.get("dryRun") == Some("All") {
            opts.dry_run = true;
        }
        Ok(opts)
    }
}

/// A parsed request path.
#[derive(Debug)]
enum Route {
    Version,
    Health,
    CoreVersions,
    Groups,
    Group(String),
    ResourceList(String, String),
    Resource(Box<Target>),
    /// `pods/<name>/eviction` in a namespace: (namespace, pod name).
    Eviction(String, String),
    /// `/openapi/v3`.
    OpenApiIndex,
    /// `/openapi/v3/<group-version path>`.
    OpenApi(String),
}

fn route(state: &State, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["version"] => return Ok(Route::Version),
        ["healthz" | "readyz" | "livez", ..] => return Ok(Route::Health),
        ["openapi", "v3"] => return Ok(Route::OpenApiIndex),
        ["openapi", "v3", rest @ ..] => return Ok(Route::OpenApi(rest.join("/"))),
        ["api"] => return Ok(Route::CoreVersions),
        ["apis"] => return Ok(Route::Groups),
        ["apis", g] => return Ok(Route::Group((*g).to_string())),
        ["api", v] => return Ok(Route::ResourceList(String::new(), (*v).to_string())),
        ["apis", g, v] => return Ok(Route::ResourceList((*g).to_string(), (*v).to_string())),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::no_such_resource()),
    };
    let reg = state.registry();
    let lookup = |r: &str| {
        reg.lookup(group, version, r)
            .ok_or_else(ApiError::no_such_resource)
    };
    let namespaced_form = matches!(rest, ["namespaces", _, res, ..]
        if reg.lookup(group, version, res).is_some_and(|i| i.namespaced));
    let (namespace, rest) = if namespaced_form {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    let (info, name, sub) = match rest {
        [res] => (lookup(res)?, None, None),
        [res, name] => (lookup(res)?, Some((*name).to_string()), None),
        [res, name, sub] => (lookup(res)?, Some((*name).to_string()), Some(*sub)),
        _ => return Err(ApiError::no_such_resource()),
    };
    if namespace.is_none() && info.namespaced && name.is_some() {
        return Err(ApiError::no_such_resource());
    }
    let status = match sub {
        None => false,
        Some("eviction") if info.group.is_empty() && info.resource == "pods" => {
            return Ok(Route::Eviction(
                namespace.unwrap_or_default(),
                name.unwrap_or_default(),
            ));
        }
        Some("status") if info.status_subresource => true,
        Some(_) => return Err(ApiError::no_such_resource()),
    };
    Ok(Route::Resource(Box::new(Target {
        info,
        namespace,
        name,
        status,
    })))
}

async fn handle(
    AxumState(state): AxumState<Arc<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (result, warnings) =
        field_validation::collect(dispatch(&state, &method, &uri, &headers, body)).await;
    let mut resp = match result {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(%method, %uri, code = e.code, reason = e.reason, message = %e.message, "API stand-in: request failed");
            error_response(&e)
        }
    };
    for w in warnings {
        // kube-apiserver's form: `299 - "<message>"`.
        if let Ok(value) = header::HeaderValue::from_str(&format!("299 - {w:?}")) {
            resp.headers_mut().append(header::WARNING, value);
        }
    }
    tracing::trace!(%method, %uri, status = resp.status().as_u16(), "API stand-in: request");
    resp
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))
}

async fn dispatch(
    state: &Arc<State>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let q = Query::parse(uri);
    let aggregated = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(discovery::wants_aggregated);
    match route(state, uri.path())? {
        Route::Version => Ok(json_response(200, &discovery::version())),
        Route::Health => Ok(text_response("ok")),
        Route::OpenApiIndex => Ok(json_response(200, &openapi::index(&state.registry()))),
        Route::OpenApi(path) => found(openapi::document(&state.registry(), &path)),
        Route::CoreVersions if aggregated => Ok(aggregated_discovery(state, true)),
        Route::Groups if aggregated => Ok(aggregated_discovery(state, false)),
        Route::CoreVersions => Ok(json_response(
            200,
            &discovery::core_versions(&state.address),
        )),
        Route::Groups => Ok(json_response(200, &discovery::groups(&state.registry()))),
        Route::Group(g) => found(discovery::group(&state.registry(), &g)),
        Route::ResourceList(g, v) => found(discovery::resource_list(&state.registry(), &g, &v)),
        Route::Eviction(ns, name) if method == Method::POST => {
            let dry_run = q.get("dryRun") == Some("All");
            let status = eviction::evict(state, &ns, &name, &body, dry_run).await?;
            Ok(json_response(201, &status))
        }
        Route::Eviction(..) => Err(ApiError::method_not_allowed()),
        Route::Resource(t) => serve_resource(state, method, &q, headers, &body, *t).await,
    }
}

/// 200 with a discovery or OpenAPI document, or 404 when there is none.
fn found(doc: Option<Value>) -> Result<Response, ApiError> {
    doc.map(|v| json_response(200, &v))
        .ok_or_else(ApiError::no_such_resource)
}

/// Aggregated discovery (`/api` when `core`, else `/apis`) with its content type.
fn aggregated_discovery(state: &State, core: bool) -> Response {
    let mut resp = json_response(200, &discovery::aggregated(&state.registry(), core));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE),
    );
    resp
}

/// Serves a verb on a resource: a collection (watch, list, create, deletecollection) or one
/// object (get, update, patch, delete).
async fn serve_resource(
    state: &Arc<State>,
    method: &Method,
    q: &Query,
    headers: &HeaderMap,
    body: &Bytes,
    t: Target,
) -> Result<Response, ApiError> {
    let collection = t.name.is_none();
    match (method.clone(), collection) {
        (Method::GET, true) if q.flag("watch") => serve_watch(state, q, t),
        (Method::GET, true) => Ok(json_response(
            200,
            &verbs::list(state, &t, &q.list_options()?).await?,
        )),
        (Method::GET, false) => Ok(json_response(200, &verbs::get(state, &t).await?)),
        (Method::POST, true) if !t.status => {
            let opts = q.write_options(Some(body))?;
            let obj = verbs::create(state, &t, parse_json(body)?, &opts).await?;
            Ok(json_response(201, &obj))
        }
        (Method::PUT, false) => {
            let opts = q.write_options(Some(body))?;
            let (code, obj) = verbs::update(state, &t, parse_json(body)?, &opts).await?;
            Ok(json_response(code, &obj))
        }
        (Method::PATCH, false) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let kind = PatchKind::from_content_type(ct)?;
            let opts = q.write_options(None)?;
            let (code, obj) = verbs::patch(state, &t, kind, body, &opts).await?;
            Ok(json_response(code, &obj))
        }
        (Method::DELETE, false) if !t.status => {
            let opts = q.delete_options(body)?;
            let (code, obj) = delete::delete(
                state,
                &t.info,
                t.namespace.as_deref().unwrap_or_default(),
                t.name.as_deref().unwrap_or_default(),
                &opts,
            )
            .await?;
            Ok(json_response(code, &obj))
        }
        (Method::DELETE, true) => {
            let opts = q.delete_options(body)?;
            let list = delete::delete_collection(state, &t, &q.list_options()?, &opts).await?;
            Ok(json_response(200, &list))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// Starts a watch and streams its newline-delimited JSON events as the response body.
fn serve_watch(state: &Arc<State>, q: &Query, t: Target) -> Result<Response, ApiError> {
    let opts = WatchOptions {
        list: q.list_options()?,
        allow_bookmarks: q.flag("allowWatchBookmarks"),
        send_initial_events: q.flag("sendInitialEvents"),
        timeout: Duration::from_secs(
            q.get("timeoutSeconds")
                .and_then(|s| s.parse().ok())
                .unwrap_or(1800),
        ),
    };
    let rx = watch::start(Arc::clone(state), t, opts)?;
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}
