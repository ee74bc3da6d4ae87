//! A small regular-expression engine for `matches`: literals, `.`, classes (`[a-z0-9_]`, `[^…]`,
//! `\d \w \s`), groups, `|`, `* + ?`, `{m}`/`{m,}`/`{m,n}` and the anchors `^ $`. Compiled to a Thompson
//! NFA and run in linear time (no backtracking), so no pattern can make matching blow up.

/// One NFA instruction.
#[derive(Debug, Clone, PartialEq)]
enum Inst {
    Char(char),
    Any,
    Class(Vec<(char, char)>, bool),
    Split(usize, usize),
    Jmp(usize),
    Start,
    End,
    Match,
}

/// A parsed pattern piece.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Char(char),
    Any,
    Class(Vec<(char, char)>, bool),
    Start,
    End,
    Group(Vec<Vec<Node>>),
    Repeat(Box<Node>, u32, Option<u32>),
}

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Regex {
    prog: Vec<Inst>,
}

/// Repetition counts above this are refused (they would blow up the program).
const MAX_REPEAT: u32 = 100;

struct P<'a> {
    s: &'a [char],
    i: usize,
}

impl P<'_> {
    fn alt(&mut self, depth: u32) -> Result<Vec<Vec<Node>>, String> {
        if depth > 32 {
            return Err("groups nested too deeply".into());
        }
        let mut alts = vec![Vec::new()];
        while self.i < self.s.len() {
            let c = self.s[self.i];
            match c {
                '|' => {
                    self.i += 1;
                    alts.push(Vec::new());
                    continue;
                }
                ')' => break,
                _ => {}
            }
            self.i += 1;
            let node = match c {
                '.' => Node::Any,
                '^' => Node::Start,
                '$' => Node::End,
                '(' => {
                    let g = self.alt(depth + 1)?;
                    if self.s.get(self.i) != Some(&')') {
                        return Err("missing `)`".into());
                    }
                    self.i += 1;
                    Node::Group(g)
                }
                '[' => self.class()?,
                '\\' => self.escape()?,
                '*' | '+' | '?' | '{' => return Err(format!("`{c}` has nothing to repeat")),
                c => Node::Char(c),
            };
            let node = self.repeat(node)?;
            if let Some(a) = alts.last_mut() {
                a.push(node);
            }
        }
        Ok(alts)
    }

    fn repeat(&mut self, mut node: Node) -> Result<Node, String> {
        loop {
            let (lo, hi) = match self.s.get(self.i) {
                Some('*') => (0, None),
                Some('+') => (1, None),
                Some('?') => (0, Some(1)),
                Some('{') => {
                    let close = self.s[self.i..].iter().position(|&c| c == '}').ok_or("missing `}`")?;
                    let body: String = self.s[self.i + 1..self.i + close].iter().collect();
                    self.i += close;
                    let num = |t: &str| t.trim().parse::<u32>().map_err(|_| format!("bad repetition {{{body}}}"));
                    match body.split_once(',') {
                        None => (num(&body)?, Some(num(&body)?)),
                        Some((a, b)) if b.trim().is_empty() => (num(a)?, None),
                        Some((a, b)) => (num(a)?, Some(num(b)?)),
                    }
                }
                _ => return Ok(node),
            };
            self.i += 1;
            if lo > MAX_REPEAT || hi.is_some_and(|h| h > MAX_REPEAT || h < lo) {
                return Err(format!("repetition {lo}..{hi:?} out of range"));
            }
            if matches!(node, Node::Start | Node::End) {
                return Err("an anchor cannot repeat".into());
            }
            node = Node::Repeat(Box::new(node), lo, hi);
        }
    }

    fn escape(&mut self) -> Result<Node, String> {
        let c = *self.s.get(self.i).ok_or("trailing `\\`")?;
        self.i += 1;
        Ok(match c {
            'd' => Node::Class(vec![('0', '9')], false),
            'D' => Node::Class(vec![('0', '9')], true),
            'w' => Node::Class(vec![('a', 'z'), ('A', 'Z'), ('0', '9'), ('_', '_')], false),
            'W' => Node::Class(vec![('a', 'z'), ('A', 'Z'), ('0', '9'), ('_', '_')], true),
            's' => Node::Class(vec![(' ', ' '), ('\t', '\t'), ('\n', '\n'), ('\r', '\r')], false),
            'S' => Node::Class(vec![(' ', ' '), ('\t', '\t'), ('\n', '\n'), ('\r', '\r')], true),
            'n' => Node::Char('\n'),
            't' => Node::Char('\t'),
            c => Node::Char(c),
        })
    }

    fn class(&mut self) -> Result<Node, String> {
        let neg = self.s.get(self.i) == Some(&'^');
        if neg {
            self.i += 1;
        }
        let mut ranges = Vec::new();
        let mut first = true;
        loop {
            let c = *self.s.get(self.i).ok_or("missing `]`")?;
            self.i += 1;
            if c == ']' && !first {
                break;
            }
            first = false;
            let lo = if c == '\\' {
                match self.escape()? {
                    Node::Char(c) => c,
                    Node::Class(r, false) => {
                        ranges.extend(r);
                        continue;
                    }
                    _ => return Err("negated escapes are not supported inside `[]`".into()),
                }
            } else {
                c
            };
            if self.s.get(self.i) == Some(&'-') && self.s.get(self.i + 1).is_some_and(|&c| c != ']') {
                let hi = self.s[self.i + 1];
                self.i += 2;
                if hi < lo {
                    return Err(format!("bad range {lo}-{hi}"));
                }
                ranges.push((lo, hi));
            } else {
                ranges.push((lo, lo));
            }
        }
        Ok(Node::Class(ranges, neg))
    }
}

fn emit_alt(alts: &[Vec<Node>], prog: &mut Vec<Inst>) -> Result<(), String> {
    let mut jumps = Vec::new();
    for (k, seq) in alts.iter().enumerate() {
        let split_at = prog.len();
        if k + 1 < alts.len() {
            prog.push(Inst::Split(split_at + 1, 0));
        }
        for n in seq {
            emit(n, prog)?;
        }
        if k + 1 < alts.len() {
            jumps.push(prog.len());
            prog.push(Inst::Jmp(0));
            let next = prog.len();
            prog[split_at] = Inst::Split(split_at + 1, next);
        }
    }
    let end = prog.len();
    for j in jumps {
        prog[j] = Inst::Jmp(end);
    }
    Ok(())
}

fn emit(n: &Node, prog: &mut Vec<Inst>) -> Result<(), String> {
    if prog.len() > 20_000 {
        return Err("pattern too large".into());
    }
    match n {
        Node::Char(c) => prog.push(Inst::Char(*c)),
        Node::Any => prog.push(Inst::Any),
        Node::Class(r, neg) => prog.push(Inst::Class(r.clone(), *neg)),
        Node::Start => prog.push(Inst::Start),
        Node::End => prog.push(Inst::End),
        Node::Group(alts) => emit_alt(alts, prog)?,
        Node::Repeat(inner, lo, hi) => {
            for _ in 0..*lo {
                emit(inner, prog)?;
            }
            match hi {
                None => {
                    // L: split body, out; body; jmp L
                    let l = prog.len();
                    prog.push(Inst::Split(l + 1, 0));
                    emit(inner, prog)?;
                    prog.push(Inst::Jmp(l));
                    let out = prog.len();
                    prog[l] = Inst::Split(l + 1, out);
                }
                Some(h) => {
                    let mut splits = Vec::new();
                    for _ in *lo..*h {
                        splits.push(prog.len());
                        prog.push(Inst::Split(prog.len() + 1, 0));
                        emit(inner, prog)?;
                    }
                    let out = prog.len();
                    for s in splits {
                        prog[s] = Inst::Split(s + 1, out);
                    }
                }
            }
        }
    }
    Ok(())
}

impl Regex {
    /// Compiles `pattern`.
    pub fn new(pattern: &str) -> Result<Regex, String> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut p = P { s: &chars, i: 0 };
        let alts = p.alt(0)?;
        if p.i < chars.len() {
            return Err("unbalanced `)`".into());
        }
        let mut prog = Vec::new();
        emit_alt(&alts, &mut prog)?;
        prog.push(Inst::Match);
        Ok(Regex { prog })
    }

    /// Whether the pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        let n = self.prog.len();
        let mut cur: Vec<usize> = Vec::new();
        let mut next: Vec<usize> = Vec::new();
        let mut seen = vec![usize::MAX; n];
        for i in 0..=chars.len() {
            // a new attempt starts at every position (unanchored search)
            if self.add(&mut cur, &mut seen, 0, i, chars.len()) {
                return true;
            }
            if i == chars.len() {
                break;
            }
            let c = chars[i];
            next.clear();
            let mut seen_next = vec![usize::MAX; n];
            for &pc in &cur {
                let ok = match &self.prog[pc] {
                    Inst::Char(x) => *x == c,
                    Inst::Any => true,
                    Inst::Class(r, neg) => r.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *neg,
                    _ => false,
                };
                if ok && self.add(&mut next, &mut seen_next, pc + 1, i + 1, chars.len()) {
                    return true;
                }
            }
            std::mem::swap(&mut cur, &mut next);
            seen = seen_next;
        }
        false
    }

    /// Adds thread `pc` at text position `at` with its epsilon closure; true when it reaches `Match`.
    fn add(&self, list: &mut Vec<usize>, seen: &mut [usize], pc: usize, at: usize, len: usize) -> bool {
        let mut stack = vec![pc];
        while let Some(pc) = stack.pop() {
            if seen[pc] == at {
                continue;
            }
            seen[pc] = at;
            match &self.prog[pc] {
                Inst::Match => return true,
                Inst::Jmp(x) => stack.push(*x),
                Inst::Split(a, b) => {
                    stack.push(*b);
                    stack.push(*a);
                }
                Inst::Start => {
                    if at == 0 {
                        stack.push(pc + 1);
                    }
                }
                Inst::End => {
                    if at == len {
                        stack.push(pc + 1);
                    }
                }
                _ => list.push(pc),
            }
        }
        false
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
        for p in ["(", "a)", "*a", "[a", "a{2,1}", "a{999}", "\\"] {
            assert!(Regex::new(p).is_err(), "{p}");
        }
    }
}
