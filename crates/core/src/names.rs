//! Naming rules shared by users, workloads and catalog images.
//!
//! A name is 1–63 characters of lowercase ASCII letters, digits and `-`, starting with a letter and not
//! ending with `-`: it is used in container names, network names, URLs and SSH user names.

use crate::CoreError;

/// Checks a name against the rule, saying which kind of name it is in the error.
pub fn validate(what: &'static str, name: &str) -> Result<(), CoreError> {
    let fail = |reason| Err(CoreError::Name { what, name: name.to_owned(), reason });
    if name.is_empty() || name.len() > 63 {
        return fail("must be 1 to 63 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return fail("must start with a lowercase letter");
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return fail("may hold only lowercase letters, digits and '-'");
    }
    if name.ends_with('-') {
        return fail("must not end with '-'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::validate;

    #[test]
    fn rule() {
        for ok in ["alice", "a", "train-01", "x9"] {
            assert!(validate("user", ok).is_ok(), "{ok}");
        }
        for bad in ["", "Alice", "1abc", "a_b", "a-", "a.b", &"a".repeat(64), "../etc"] {
            assert!(validate("user", bad).is_err(), "{bad}");
        }
    }
}
