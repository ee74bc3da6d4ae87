//! `gpuhub tokens` and `gpuhub passwd`: the caller's own credentials.

use super::{Out, print_json, read_password};
use crate::cli::TokensCommand;
use crate::http::{Api, decode};
use crate::table::Table;
use crate::{ClientError, Context};
use gpuhub_api::{ChangePasswordRequest, CreateTokenRequest, NewTokenView, TokenView};
use reqwest::Method;

/// The tokens as a table: `ID KIND CREATED EXPIRES` with `*` on the one in use.
pub(crate) fn tokens_text(list: &[TokenView]) -> String {
    let mut t = Table::new(&["ID", "KIND", "CREATED", "EXPIRES", "CURRENT"]);
    let day = |d: chrono::DateTime<chrono::Utc>| d.format("%Y-%m-%d %H:%M").to_string();
    for v in list {
        t.row(vec![
            v.id.clone(),
            v.kind.clone(),
            day(v.created_at),
            v.expires_at.map_or_else(|| "never".to_owned(), day),
            if v.current { "*" } else { "" }.to_owned(),
        ]);
    }
    t.render("")
}

/// `gpuhub tokens [create [--days N] | rm ID]`.
pub(crate) async fn tokens(api: &Api, json: bool, cmd: Option<TokensCommand>, out: Out<'_>) -> Result<(), ClientError> {
    match cmd {
        None => {
            let v = serde_json::Value::Array(api.get_all_pages(&["me", "tokens"], &[]).await?);
            if json {
                return print_json(out, &v);
            }
            let list: Vec<TokenView> = decode(&v, api.url(&["me", "tokens"], &[]).as_str())?;
            write!(out, "{}", tokens_text(&list))?;
        }
        Some(TokensCommand::Create { days }) => {
            let v = api.send_json(Method::POST, &["me", "tokens"], &CreateTokenRequest { days }).await?;
            let v = v.unwrap_or_default();
            if json {
                return print_json(out, &v);
            }
            let t: NewTokenView = decode(&v, api.url(&["me", "tokens"], &[]).as_str())?;
            writeln!(out, "{}", t.token)?;
            writeln!(
                out,
                "token {} expires {}; it is not shown again",
                t.id,
                t.expires_at.format("%Y-%m-%d %H:%M UTC")
            )?;
        }
        Some(TokensCommand::Rm { id }) => {
            api.call(Method::DELETE, &["me", "tokens", &id], &[], None).await?;
            if !json {
                writeln!(out, "revoked token {id}")?;
            }
        }
    }
    Ok(())
}

/// `gpuhub passwd`.
pub(crate) async fn passwd(ctx: &Context, api: &Api, stdin: bool, out: Out<'_>) -> Result<(), ClientError> {
    let current_password = read_password(ctx, stdin, "current password: ", false)?;
    let new_password = read_password(&Context { password: None, ..ctx.clone() }, stdin, "new password: ", true)?;
    let req = ChangePasswordRequest { current_password, new_password };
    api.send_json(Method::POST, &["me", "password"], &req).await?;
    writeln!(out, "password changed; your other tokens and sessions were revoked")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_table_marks_the_current_one() {
        let t = chrono::DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z").unwrap().with_timezone(&chrono::Utc);
        let list = vec![
            TokenView {
                id: "0123456789abcdef".into(),
                kind: "api".into(),
                created_at: t,
                expires_at: Some(t),
                current: true,
            },
            TokenView {
                id: "fedcba9876543210".into(),
                kind: "session".into(),
                created_at: t,
                expires_at: None,
                current: false,
            },
        ];
        let text = tokens_text(&list);
        assert!(text.starts_with("ID"), "{text}");
        assert!(text.lines().nth(1).unwrap().trim_end().ends_with('*'), "{text}");
        assert!(text.lines().nth(2).unwrap().contains("never"), "{text}");
    }
}
