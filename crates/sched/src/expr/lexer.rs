//! Tokens of resource expressions.

use super::ExprError;

/// One token with its byte offset.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// What it is.
    pub kind: Tok,
    /// Byte offset in the source.
    pub pos: usize,
}

/// Token kinds.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// A number, with its unit already applied.
    Num(f64),
    /// A quoted string.
    Str(String),
    /// An identifier or keyword.
    Ident(String),
    /// Punctuation or an operator.
    Sym(&'static str),
    /// End of input.
    End,
}

impl Tok {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Tok::Num(n) => format!("number {n}"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Sym(s) => format!("`{s}`"),
            Tok::End => "end of input".into(),
        }
    }
}

const SYMS: [&str; 19] =
    ["&&", "||", "==", "!=", "<=", ">=", "<", ">", "!", "(", ")", "[", "]", ",", "+", "-", "*", "/", "%"];

/// Size units: binary (`KiB`, `Gi`) and decimal (`KB`, `G`).
pub const UNITS: [(&str, f64); 17] = [
    ("KiB", 1024.0),
    ("MiB", 1_048_576.0),
    ("GiB", 1_073_741_824.0),
    ("TiB", 1_099_511_627_776.0),
    ("Ki", 1024.0),
    ("Mi", 1_048_576.0),
    ("Gi", 1_073_741_824.0),
    ("Ti", 1_099_511_627_776.0),
    ("KB", 1e3),
    ("MB", 1e6),
    ("GB", 1e9),
    ("TB", 1e12),
    ("K", 1e3),
    ("M", 1e6),
    ("G", 1e9),
    ("T", 1e12),
    ("B", 1.0),
];

/// Splits `src` into tokens.
pub fn lex(src: &str) -> Result<Vec<Token>, ExprError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
            let text: String = src[start..i].chars().filter(|&c| c != '_').collect();
            let mut n: f64 = text.parse().map_err(|_| ExprError::parse(start, "a number", &format!("{text:?}")))?;
            let ustart = i;
            while i < b.len() && b[i].is_ascii_alphabetic() {
                i += 1;
            }
            if i > ustart {
                let unit = &src[ustart..i];
                let f = UNITS.iter().find(|(u, _)| *u == unit).map(|u| u.1).ok_or_else(|| {
                    ExprError::parse(ustart, "a unit (KiB, MiB, GiB, TiB, KB, MB, GB, TB, B)", &format!("`{unit}`"))
                })?;
                n *= f;
            }
            out.push(Token { kind: Tok::Num(n), pos: start });
            continue;
        }
        if c == b'"' || c == b'\'' {
            let quote = c;
            i += 1;
            let mut s = String::new();
            loop {
                let Some(&d) = b.get(i) else {
                    return Err(ExprError::parse(i, "a closing quote", "end of input"));
                };
                if d == quote {
                    i += 1;
                    break;
                }
                if d == b'\\' {
                    let Some(e) = src[i + 1..].chars().next() else {
                        return Err(ExprError::parse(i + 1, "an escaped character", "end of input"));
                    };
                    s.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                    i += 1 + e.len_utf8();
                    continue;
                }
                // copy one UTF-8 character
                let ch = src[i..].chars().next().unwrap_or('\u{fffd}');
                s.push(ch);
                i += ch.len_utf8();
            }
            out.push(Token { kind: Tok::Str(s), pos: start });
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            // a trailing '.' belongs to the next token
            while i > start + 1 && b[i - 1] == b'.' {
                i -= 1;
            }
            out.push(Token { kind: Tok::Ident(src[start..i].to_owned()), pos: start });
            continue;
        }
        let Some(sym) = SYMS.iter().find(|s| src[i..].starts_with(**s)) else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(ExprError::parse(i, "an operand or operator", &format!("`{ch}`")));
        };
        i += sym.len();
        out.push(Token { kind: Tok::Sym(sym), pos: start });
    }
    out.push(Token { kind: Tok::End, pos: src.len() });
    Ok(out)
}
