//! AWS Signature Version 4, verified: every call of the AWS face is signed with its cloud's key
//! ([`super::credentials`]), for the emulator's region and a service the face answers, within 15 minutes of now.
//!
//! The signature is recomputed here with `hmac` and `sha2`, the canonical request built as AWS documents it
//! ("Create a canonical request for Signature Version 4"), not with the `aws-sigv4` crate: that crate signs a
//! request it is given, choosing for itself which headers to sign and setting `X-Amz-Date` to its own clock,
//! while a verifier must sign exactly the headers the client listed in `SignedHeaders`, at the client's time.
//! (The integration tests sign with `aws-sigv4`, so the two are checked against each other.)

use std::time::Duration;

use axum::http::HeaderMap;
use hmac::{Hmac, KeyInit, Mac};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use sha2::{Digest, Sha256};

use super::credentials::Keys;

pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// How far a request's time may be from the emulator's clock, either way (AWS's bound).
pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

/// The most headers a request may sign: far more than any SDK does, few enough to bound the work.
const SIGNED_HEADERS_MAX: usize = 64;

/// What AWS's URI encoding leaves as it is: the unreserved characters.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
/// The same for a path, whose slashes stay.
const PATH: &AsciiSet = &UNRESERVED.remove(b'/');

/// Why a request's signature is not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No SigV4 `Authorization` header.
    Missing,
    /// A header that is not a whole SigV4 signature, or one that signs too little.
    Incomplete(String),
    /// Its time is too far from now.
    Expired(String),
    /// The key is not this cloud's.
    UnknownKey,
    /// Signed for another region, service or day.
    Scope(String),
    /// The signature is not the request's.
    Mismatch,
}

/// A request as it arrived, as much of it as is signed.
pub struct Signed<'a> {
    pub method: &'a str,
    /// As received: still percent-encoded.
    pub path: &'a str,
    pub query: &'a str,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…` header.
#[derive(Debug, PartialEq, Eq)]
struct Authorization<'a> {
    key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

/// The access key ID an `Authorization` header names, if it is a SigV4 one: where a call is routed (whose
/// cloud), nothing verified yet.
pub fn key_id(authorization: &str) -> Option<&str> {
    parse(authorization).ok().map(|a| a.key_id)
}

/// The service an `Authorization` header's credential is scoped to, nothing verified yet: which API a call is to.
pub fn service(authorization: &str) -> Option<&str> {
    parse(authorization).ok().map(|a| a.service)
}

fn parse(header: &str) -> Result<Authorization<'_>, Refusal> {
    let incomplete = |why: &str| Refusal::Incomplete(format!("{why} in the Authorization header"));
    let rest = header.strip_prefix(ALGORITHM).filter(|r| r.starts_with(' ')).ok_or(Refusal::Missing)?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=').ok_or_else(|| incomplete("a part without '='"))?;
        let slot = match k {
            "Credential" => &mut credential,
            "SignedHeaders" => &mut signed,
            "Signature" => &mut signature,
            _ => return Err(incomplete(&format!("an unknown part {k:?}"))),
        };
        if slot.replace(v).is_some() {
            return Err(incomplete(&format!("{k} twice")));
        }
    }
    let credential = credential.ok_or_else(|| incomplete("no Credential"))?;
    let mut scope = credential.split('/');
    let (Some(key_id), Some(date), Some(region), Some(service), Some("aws4_request"), None) =
        (scope.next(), scope.next(), scope.next(), scope.next(), scope.next(), scope.next())
    else {
        return Err(incomplete("a Credential that is not <key>/<date>/<region>/<service>/aws4_request"));
    };
    let signed_headers: Vec<&str> = signed.ok_or_else(|| incomplete("no SignedHeaders"))?.split(';').collect();
    if signed_headers.len() > SIGNED_HEADERS_MAX || signed_headers.iter().any(|h| h.is_empty()) {
        return Err(incomplete("a SignedHeaders that is not a list of at most 64 header names"));
    }
    let signature = signature.ok_or_else(|| incomplete("no Signature"))?;
    Ok(Authorization { key_id, date, region, service, signed_headers, signature })
}

/// Verify `req`'s signature: by `keys`, for `region` and one of `services`, made within [`MAX_SKEW`] of `now`.
pub fn verify(
    req: &Signed<'_>,
    keys: &Keys,
    region: &str,
    services: &[&str],
    now: jiff::Timestamp,
) -> Result<(), Refusal> {
    let header = |name: &str| req.headers.get(name).and_then(|v| v.to_str().ok());
    let auth = parse(header("authorization").ok_or(Refusal::Missing)?)?;
    // Constant time would hide nothing here: the key ID is sent in the clear.
    if auth.key_id != keys.access_key_id {
        return Err(Refusal::UnknownKey);
    }
    let amz_date = header("x-amz-date")
        .ok_or_else(|| Refusal::Incomplete("the request has no X-Amz-Date header; SigV4 needs one".into()))?;
    let signed_at = jiff::fmt::strtime::parse("%Y%m%dT%H%M%SZ", amz_date)
        .and_then(|t| t.to_datetime())
        .and_then(|t| t.to_zoned(jiff::tz::TimeZone::UTC))
        .map_err(|_| Refusal::Incomplete(format!("X-Amz-Date {amz_date:?} is not of the form 20060102T150405Z")))?
        .timestamp();
    let skew = now.duration_since(signed_at).unsigned_abs();
    if skew > MAX_SKEW {
        return Err(Refusal::Expired(format!(
            "Request has expired: signed at {signed_at}, {}s from the emulator's clock ({now}); at most {}s is \
             accepted",
            skew.as_secs(),
            MAX_SKEW.as_secs()
        )));
    }
    if !amz_date.starts_with(auth.date) || auth.date.len() != 8 {
        return Err(Refusal::Scope(format!("the credential's date {} is not X-Amz-Date's day", auth.date)));
    }
    if auth.region != region {
        return Err(Refusal::Scope(format!(
            "the credential is scoped to region {:?}; this cloud's is {region:?}",
            auth.region
        )));
    }
    if !services.contains(&auth.service) {
        return Err(Refusal::Scope(format!(
            "the credential is scoped to service {:?}; this endpoint answers {}",
            auth.service,
            services.join(", ")
        )));
    }
    if !auth.signed_headers.contains(&"host") {
        return Err(Refusal::Incomplete("SignedHeaders must include host".into()));
    }
    let given = data_encoding::HEXLOWER_PERMISSIVE
        .decode(auth.signature.as_bytes())
        .ok()
        .filter(|g| g.len() == 32)
        .ok_or_else(|| Refusal::Incomplete("the Signature is not 64 hex digits".into()))?;
    let scope = format!("{}/{}/{}/aws4_request", auth.date, auth.region, auth.service);
    let to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request(req, &auth)?.as_bytes()))
    );
    let key = [auth.date, auth.region, auth.service, "aws4_request"]
        .iter()
        .fold(format!("AWS4{}", keys.secret_access_key).into_bytes(), |key, part| hmac(&key, part.as_bytes()));
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).map_err(|_| Refusal::Mismatch)?;
    mac.update(to_sign.as_bytes());
    // Compared in constant time (`verify_slice`): how much of a signature is right is not to be timed.
    mac.verify_slice(&given).map_err(|_| Refusal::Mismatch)
}

/// The canonical request: method, path, query, the signed headers and the body's hash, as AWS documents it.
fn canonical_request(req: &Signed<'_>, auth: &Authorization<'_>) -> Result<String, Refusal> {
    let path = if req.path.is_empty() { "/" } else { req.path };
    // Encoded once more (AWS's services but S3 sign the path as the client encoded it, encoded again).
    let path = utf8_percent_encode(path, PATH).to_string();
    let mut query: Vec<(String, String)> = req
        .query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (encode(k), encode(v))
        })
        .collect();
    query.sort();
    let query: Vec<String> = query.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut headers = String::new();
    for name in &auth.signed_headers {
        let values: Vec<String> = req
            .headers
            .get_all(*name)
            .iter()
            .map(|v| v.to_str().map(|v| v.split_whitespace().collect::<Vec<_>>().join(" ")))
            .collect::<Result<_, _>>()
            .map_err(|_| Refusal::Incomplete(format!("the signed header {name} is not text")))?;
        if values.is_empty() {
            return Err(Refusal::Incomplete(format!("the signed header {name} is not in the request")));
        }
        headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    Ok(format!(
        "{}\n{path}\n{}\n{headers}\n{}\n{}",
        req.method,
        query.join("&"),
        auth.signed_headers.join(";"),
        hex(&Sha256::digest(req.body))
    ))
}

/// A query string's name or value as AWS signs it: decoded as sent, then encoded with AWS's rules.
fn encode(s: &str) -> String {
    let decoded = percent_decode_str(s).decode_utf8_lossy();
    utf8_percent_encode(&decoded, UNRESERVED).to_string()
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length: this never fails.
    match <Hmac<Sha256> as KeyInit>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::http::HeaderValue;

    use super::*;

    /// AWS's own example key and its published test suite's `get-vanilla` case (service "service", 2015-08-30).
    fn example() -> Keys {
        Keys {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            account_id: "123456789012".into(),
        }
    }
    const VANILLA: &str = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
                           SignedHeaders=host;x-amz-date, \
                           Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";

    fn at(t: &str) -> jiff::Timestamp {
        t.parse().unwrap()
    }

    fn headers(authorization: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("example.amazonaws.com"));
        h.insert("x-amz-date", HeaderValue::from_static("20150830T123600Z"));
        h.insert("authorization", HeaderValue::from_str(authorization).unwrap());
        h
    }

    fn check(authorization: &str, region: &str, now: &str) -> Result<(), Refusal> {
        let h = headers(authorization);
        let req = Signed { method: "GET", path: "/", query: "", headers: &h, body: b"" };
        verify(&req, &example(), region, &["service"], at(now))
    }

    #[test]
    fn awss_test_vector_verifies() {
        assert_eq!(check(VANILLA, "us-east-1", "2015-08-30T12:36:00Z"), Ok(()));
        assert_eq!(key_id(VANILLA), Some("AKIDEXAMPLE"));
    }

    #[test]
    fn a_tampered_signature_a_wrong_region_or_service_and_skew_are_refused() {
        let tampered = VANILLA.replace("bf31", "bf32");
        assert_eq!(check(&tampered, "us-east-1", "2015-08-30T12:36:00Z"), Err(Refusal::Mismatch));
        assert!(matches!(check(VANILLA, "eu-west-1", "2015-08-30T12:36:00Z"), Err(Refusal::Scope(_))));
        let h = headers(VANILLA);
        let req = Signed { method: "GET", path: "/", query: "", headers: &h, body: b"" };
        let ec2_only = verify(&req, &example(), "us-east-1", &["ec2"], at("2015-08-30T12:36:00Z"));
        assert!(matches!(ec2_only, Err(Refusal::Scope(_))));
        // 15 minutes either way is accepted; a second more is not.
        assert_eq!(check(VANILLA, "us-east-1", "2015-08-30T12:51:00Z"), Ok(()));
        assert!(matches!(check(VANILLA, "us-east-1", "2015-08-30T12:51:01Z"), Err(Refusal::Expired(_))));
        assert!(matches!(check(VANILLA, "us-east-1", "2015-08-30T12:20:59Z"), Err(Refusal::Expired(_))));
        // The same request with another method or body is not the one signed.
        let req = Signed { method: "POST", path: "/", query: "", headers: &h, body: b"" };
        assert_eq!(
            verify(&req, &example(), "us-east-1", &["service"], at("2015-08-30T12:36:00Z")),
            Err(Refusal::Mismatch)
        );
        let req = Signed { method: "GET", path: "/", query: "", headers: &h, body: b"x" };
        assert_eq!(
            verify(&req, &example(), "us-east-1", &["service"], at("2015-08-30T12:36:00Z")),
            Err(Refusal::Mismatch)
        );
    }

    #[test]
    fn an_unknown_key_or_a_garbled_header_is_refused() {
        let other = VANILLA.replace("AKIDEXAMPLE", "AKIDOTHER");
        assert_eq!(check(&other, "us-east-1", "2015-08-30T12:36:00Z"), Err(Refusal::UnknownKey));
        for garbled in [
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service, SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, Signature=00",
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host, \
             Signature=zz",
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
            "AWS4-HMAC-SHA256 Credential=A/B, Credential=C/D",
        ] {
            assert!(
                matches!(check(garbled, "us-east-1", "2015-08-30T12:36:00Z"), Err(Refusal::Incomplete(_))),
                "{garbled}"
            );
        }
        assert_eq!(check("Bearer fc_token", "us-east-1", "2015-08-30T12:36:00Z"), Err(Refusal::Missing));
        assert_eq!(key_id("Bearer fc_token"), None);
    }

    #[test]
    fn the_query_string_is_signed_sorted_and_encoded_as_aws_does() {
        let auth = parse(VANILLA).unwrap();
        let h = headers(VANILLA);
        let req = Signed { method: "GET", path: "/", query: "b=2&a=x%20y&Action=Describe", headers: &h, body: b"" };
        let canonical = canonical_request(&req, &auth).unwrap();
        assert_eq!(canonical.lines().nth(2), Some("Action=Describe&a=x%20y&b=2"));
    }
}
