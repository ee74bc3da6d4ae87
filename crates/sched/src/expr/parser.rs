//! Recursive-descent parser of resource expressions.
//!
//! ```text
//! or    := and ("||" and)*
//! and   := not ("&&" not)*
//! not   := "!" not | cmp
//! cmp   := sum (("=="|"!="|"<"|"<="|">"|">="|"startswith"|"endswith"|"contains"|"matches") sum
//!              | "in" sum)?
//! sum   := prod (("+"|"-") prod)*
//! prod  := unary (("*"|"/"|"%") unary)*
//! unary := "-" unary | atom
//! atom  := number unit? | string | "true" | "false" | path | path "[" string "]" | "(" or ")"
//!        | "[" (or ("," or)*)? "]"
//! ```

use super::ExprError;
use super::ast::{Attr, BinOp, Expr};
use super::lexer::{Tok, Token, lex};

/// Parses a whole expression.
pub fn parse(src: &str) -> Result<Expr, ExprError> {
    let toks = lex(src)?;
    let mut p = Parser { toks, i: 0, depth: 0 };
    let e = p.or()?;
    p.expect_end()?;
    Ok(e)
}

struct Parser {
    toks: Vec<Token>,
    i: usize,
    depth: u32,
}

/// Nesting deeper than this is refused (keeps recursion bounded).
const MAX_DEPTH: u32 = 64;

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.i].kind
    }

    fn pos(&self) -> usize {
        self.toks[self.i].pos
    }

    fn bump(&mut self) -> Tok {
        let t = self.toks[self.i].kind.clone();
        if self.i + 1 < self.toks.len() {
            self.i += 1;
        }
        t
    }

    fn is_sym(&self, s: &str) -> bool {
        matches!(self.peek(), Tok::Sym(x) if *x == s)
    }

    fn fail<T>(&self, expected: &str) -> Result<T, ExprError> {
        Err(ExprError::parse(self.pos(), expected, &self.peek().describe()))
    }

    fn expect_sym(&mut self, s: &str) -> Result<(), ExprError> {
        if self.is_sym(s) {
            self.bump();
            Ok(())
        } else {
            self.fail(&format!("`{s}`"))
        }
    }

    fn expect_end(&self) -> Result<(), ExprError> {
        if matches!(self.peek(), Tok::End) { Ok(()) } else { self.fail("an operator or end of input") }
    }

    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.fail("less nesting");
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Expr, ExprError> {
        self.enter()?;
        let mut e = self.and()?;
        while self.is_sym("||") {
            self.bump();
            let r = self.and()?;
            e = Expr::Bin(BinOp::Or, Box::new(e), Box::new(r));
        }
        self.depth -= 1;
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr, ExprError> {
        let mut e = self.not()?;
        while self.is_sym("&&") {
            self.bump();
            let r = self.not()?;
            e = Expr::Bin(BinOp::And, Box::new(e), Box::new(r));
        }
        Ok(e)
    }

    fn not(&mut self) -> Result<Expr, ExprError> {
        if self.is_sym("!") {
            self.bump();
            self.enter()?;
            let e = self.not()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(e)));
        }
        self.cmp()
    }

    fn cmp(&mut self) -> Result<Expr, ExprError> {
        let a = self.sum()?;
        let op = match self.peek() {
            Tok::Sym("==") => BinOp::Eq,
            Tok::Sym("!=") => BinOp::Ne,
            Tok::Sym("<") => BinOp::Lt,
            Tok::Sym("<=") => BinOp::Le,
            Tok::Sym(">") => BinOp::Gt,
            Tok::Sym(">=") => BinOp::Ge,
            Tok::Ident(w) if w == "startswith" => BinOp::StartsWith,
            Tok::Ident(w) if w == "endswith" => BinOp::EndsWith,
            Tok::Ident(w) if w == "contains" => BinOp::Contains,
            Tok::Ident(w) if w == "matches" => BinOp::Matches,
            Tok::Ident(w) if w == "in" => {
                self.bump();
                let b = self.sum()?;
                return Ok(Expr::In(Box::new(a), Box::new(b)));
            }
            _ => return Ok(a),
        };
        self.bump();
        let b = self.sum()?;
        Ok(Expr::Bin(op, Box::new(a), Box::new(b)))
    }

    fn sum(&mut self) -> Result<Expr, ExprError> {
        let mut e = self.prod()?;
        loop {
            let op = match self.peek() {
                Tok::Sym("+") => BinOp::Add,
                Tok::Sym("-") => BinOp::Sub,
                _ => return Ok(e),
            };
            self.bump();
            let r = self.prod()?;
            e = Expr::Bin(op, Box::new(e), Box::new(r));
        }
    }

    fn prod(&mut self) -> Result<Expr, ExprError> {
        let mut e = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Sym("*") => BinOp::Mul,
                Tok::Sym("/") => BinOp::Div,
                Tok::Sym("%") => BinOp::Rem,
                _ => return Ok(e),
            };
            self.bump();
            let r = self.unary()?;
            e = Expr::Bin(op, Box::new(e), Box::new(r));
        }
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        if self.is_sym("-") {
            self.bump();
            self.enter()?;
            let e = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Neg(Box::new(e)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Expr, ExprError> {
        let pos = self.pos();
        match self.peek().clone() {
            Tok::Num(n) => {
                self.bump();
                Ok(Expr::Num(n))
            }
            Tok::Str(s) => {
                self.bump();
                Ok(Expr::Str(s))
            }
            Tok::Sym("(") => {
                self.bump();
                let e = self.or()?;
                self.expect_sym(")")?;
                Ok(e)
            }
            Tok::Sym("[") => {
                self.bump();
                self.enter()?;
                let mut items = Vec::new();
                if !self.is_sym("]") {
                    loop {
                        items.push(self.or()?);
                        if self.is_sym(",") {
                            self.bump();
                            continue;
                        }
                        break;
                    }
                }
                if !self.is_sym("]") {
                    return self.fail("`,` or `]`");
                }
                self.bump();
                self.depth -= 1;
                Ok(Expr::List(items))
            }
            Tok::Ident(w) if w == "true" || w == "false" => {
                self.bump();
                Ok(Expr::Bool(w == "true"))
            }
            Tok::Ident(w) if w == "node.labels" => {
                self.bump();
                self.expect_sym("[")?;
                let Tok::Str(key) = self.peek().clone() else {
                    return self.fail("a label name in quotes");
                };
                self.bump();
                self.expect_sym("]")?;
                Ok(Expr::Attr(Attr::NodeLabel(key)))
            }
            Tok::Ident(w) => match Attr::from_path(&w) {
                Some(a) => {
                    self.bump();
                    Ok(Expr::Attr(a))
                }
                None => Err(ExprError::parse(
                    pos,
                    "an attribute (node.name, node.cpu, node.memory, node.gpus, node.labels.<key>, gpu.model, \
                     gpu.memory, gpu.index, gpu.uuid)",
                    &format!("`{w}`"),
                )),
            },
            _ => self.fail("a number, string, attribute, list or `(`"),
        }
    }
}
