//! Pages of workloads: how big a page grows and the opaque cursor that carries a listing on (the API's
//! `X-Next-Cursor`, the portal's next-page links).

use super::{Kind, ServiceError};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use gpuhub_store::WorkloadCursor;

/// A page stops growing once its workloads hold about this much text (long commands and environments),
/// so that a response stays a few MiB whatever `limit` asks for; the cursor carries on.
pub const PAGE_MAX_BYTES: usize = 4 << 20;

/// The opaque form of a cursor: `<created_at ms>.<id>` in URL-safe base64.
pub fn encode_cursor(c: &WorkloadCursor) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}.{}", c.created_at_ms, c.id))
}

/// Reads a cursor made by [`encode_cursor`]; anything else is [`Kind::Malformed`], naming `cursor`.
pub fn decode_cursor(s: &str) -> Result<WorkloadCursor, ServiceError> {
    let bad = || {
        ServiceError::new(
            Kind::Malformed,
            "invalid cursor: not one this server made; pass the X-Next-Cursor of the previous page unchanged",
        )
    };
    let bytes = URL_SAFE_NO_PAD.decode(s.trim()).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (at, id) = text.split_once('.').ok_or_else(bad)?;
    let created_at_ms = at.parse::<i64>().map_err(|_| bad())?;
    if id.is_empty() || id.len() > 128 {
        return Err(bad());
    }
    Ok(WorkloadCursor { created_at_ms, id: id.to_owned() })
}
