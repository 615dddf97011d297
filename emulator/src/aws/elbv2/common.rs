//! What ELBv2's actions share: ELB's refusal of a bad value, names as ELB takes them, and pages.

use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;

/// A parameter's value refused, in ELB's words (botocore's `ValidationError`).
pub fn validation(message: impl Into<String>) -> AwsError {
    AwsError::client("ValidationError", message)
}

/// An NLB's name as ELB takes it: 1 to 32 letters, digits and hyphens, not starting or ending with a hyphen,
/// not starting with `internal-`.
pub fn check_name(kind: &str, name: &str) -> Result<()> {
    let ok = (1..=32).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !ok {
        return Err(validation(format!(
            "{kind} name '{name}' must be 1 to 32 letters, digits or hyphens, not starting or ending with a hyphen"
        )));
    }
    Ok(())
}

/// A page of `items` from `Marker` (the face's own: how many the pages before passed over) of at most
/// `PageSize` (1–400, ELB's bounds), and the marker of the next page.
pub fn page<T>(items: Vec<T>, params: &mut Params) -> Result<(Vec<T>, Option<String>)> {
    let size = params.int("PageSize", 1, 400)?.map_or(usize::MAX, |n| n as usize);
    let skip: usize = Params::next_token(params.take("Marker").as_deref())?;
    let total = items.len();
    let page: Vec<T> = items.into_iter().skip(skip).take(size).collect();
    let next = skip + page.len();
    Ok((page, (next < total).then(|| next.to_string())))
}
