//! Where SQLite's and PostgreSQL's SQL differ for this store: each difference one function here, so the store's
//! statements stay one text for both everywhere else.

use sqlx::AnyConnection;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn of(conn: &AnyConnection) -> Self {
        if conn.backend_name() == "SQLite" { Self::Sqlite } else { Self::Postgres }
    }

    /// The value of one tag of an instance (its `tags` column holds a JSON object), the key bound at `param`
    /// as [`Backend::tag_key`] writes it.
    pub fn tag_value(self, param: &str) -> String {
        match self {
            Self::Sqlite => format!("json_extract(tags, {param})"),
            Self::Postgres => format!("(tags::jsonb ->> {param})"),
        }
    }

    /// What to bind for [`Backend::tag_value`]: SQLite takes a JSON path, PostgreSQL the key itself.
    pub fn tag_key(self, key: &str) -> String {
        match self {
            Self::Sqlite => format!("$.\"{key}\""),
            Self::Postgres => key.to_string(),
        }
    }

    /// A JSON array of arrays bound at `$1`, as rows in its order: each row's `value ->> i` is its i-th item
    /// as text (to be cast where the column is not text), `key` its place.
    pub fn json_rows(self) -> &'static str {
        match self {
            Self::Sqlite => "json_each($1)",
            Self::Postgres => "jsonb_array_elements($1::jsonb) WITH ORDINALITY AS j(value, key)",
        }
    }
}
