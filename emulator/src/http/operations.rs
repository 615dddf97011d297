//! The API's operations, read from its OpenAPI document: each one's name, the role it needs and its status of
//! success. The gatekeeper looks up every call here; fault rules and rate limits name operations from here.

use std::collections::HashMap;

use axum::http::Method;

use crate::auth::Role;

/// The API's operations by method and route, read from the OpenAPI document.
#[derive(Debug, Default)]
pub(super) struct Operations(HashMap<(Method, String), Operation>);

#[derive(Debug, Clone)]
pub(super) struct Operation {
    pub name: String,
    pub role: Role,
    /// The status of success: 201 for a create, else 200.
    pub success: u16,
}

impl Operations {
    pub fn from_spec(api: &utoipa::openapi::OpenApi) -> Self {
        let mut map = HashMap::new();
        for (path, item) in &api.paths.paths {
            let methods = [
                (Method::GET, &item.get),
                (Method::POST, &item.post),
                (Method::PUT, &item.put),
                (Method::PATCH, &item.patch),
                (Method::DELETE, &item.delete),
            ];
            for (method, op) in methods {
                let Some(op) = op else { continue };
                let security = serde_json::to_string(&op.security).unwrap_or_default();
                let role = if security.contains("\"user\"") { Role::User } else { Role::Admin };
                let name = op.operation_id.clone().unwrap_or_else(|| path.clone());
                let success = if op.responses.responses.contains_key("201") { 201 } else { 200 };
                map.insert((method, path.clone()), Operation { name, role, success });
            }
        }
        Self(map)
    }

    /// The operation `method` calls on `route`; HEAD calls a GET operation, without the body.
    pub fn get(&self, method: &Method, route: &str) -> Option<&Operation> {
        let method = if method == Method::HEAD { &Method::GET } else { method };
        self.0.get(&(method.clone(), route.to_string()))
    }

    /// The methods `route` has, for `Allow` (`None`: not an API route).
    pub fn allow(&self, route: &str) -> Option<String> {
        let has = |m: &Method| self.0.contains_key(&(m.clone(), route.to_string()));
        let mut methods = Vec::new();
        for m in [Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            if has(&m) {
                methods.push(m.to_string());
                if m == Method::GET {
                    methods.push(Method::HEAD.to_string());
                }
            }
        }
        (!methods.is_empty()).then(|| methods.join(", "))
    }

    /// Every operation name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.0.values().map(|o| o.name.clone()).collect();
        v.sort();
        v
    }
}
