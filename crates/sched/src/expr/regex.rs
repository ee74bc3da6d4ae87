//! Patterns for `matches`: the `regex` crate's syntax (literals, `.`, classes, `\d \w \s`, groups, `|`,
//! repetition, the anchors `^ $`), searched anywhere in the text unless anchored. The crate runs in
//! linear time (no backtracking), so no pattern can make matching blow up; the compiled program's size
//! is capped so that no pattern can take much memory either.

/// How large one compiled pattern may grow (a label pattern is a few dozen bytes; `(a{100}){100}` is
/// refused).
const SIZE_LIMIT: usize = 256 * 1024;

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct Regex(regex::Regex);

impl PartialEq for Regex {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Regex {
    /// Compiles `pattern`; the error is the crate's reason, in one line.
    pub fn new(pattern: &str) -> Result<Regex, String> {
        regex::RegexBuilder::new(pattern).size_limit(SIZE_LIMIT).dfa_size_limit(SIZE_LIMIT).build().map(Regex).map_err(
            |e| match e {
                regex::Error::CompiledTooBig(_) => "the pattern is too large".to_owned(),
                regex::Error::Syntax(s) => {
                    s.lines().find_map(|l| l.trim().strip_prefix("error: ")).unwrap_or("invalid pattern").to_owned()
                }
                _ => "invalid pattern".to_owned(),
            },
        )
    }

    /// Whether the pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        self.0.is_match(text)
    }
}

#[cfg(test)]
mod tests {
    use super::Regex;

    fn m(p: &str, t: &str) -> bool {
        Regex::new(p).unwrap().is_match(t)
    }

    #[test]
    fn basics() {
        assert!(m("H100", "NVIDIA H100 80GB"));
        assert!(m("^NVIDIA (A|H)100", "NVIDIA H100"));
        assert!(!m("^A100$", "A100-80G"));
        assert!(m("^A100(-80G)?$", "A100-80G"));
        assert!(m("^[AH]\\d{3}$", "H200"));
        assert!(!m("^[AH]\\d{3}$", "V100"));
        assert!(m("rack-[^b]", "rack-a"));
        assert!(!m("rack-[^b]", "rack-b"));
        assert!(m("a.*z", "abcz"));
        assert!(m("x*", ""));
        assert!(m("^(ab)+$", "ababab"));
        assert!(!m("^(ab)+$", "ababa"));
        assert!(m("^a{2,3}$", "aaa"));
        assert!(!m("^a{2,3}$", "aaaa"));
    }

    #[test]
    fn no_blowup() {
        let t = "a".repeat(5000);
        assert!(!m("^(a*)*b$", &t));
    }

    #[test]
    fn errors() {
        for p in ["(", "a)", "*a", "[a", "a{2,1}", "(a{100}){100}", "\\"] {
            assert!(Regex::new(p).is_err(), "{p}");
        }
        let why = Regex::new("[a").unwrap_err();
        assert!(!why.contains('\n') && why.contains("unclosed"), "{why}");
        assert_eq!(Regex::new("(a{100}){100}{100}").unwrap_err(), "the pattern is too large");
    }
}
