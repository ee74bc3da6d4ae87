//! Resource expressions: a small language over node and GPU attributes that a request can carry to say
//! where it may run, e.g.
//! `gpu.model in ["H100","H200"] && gpu.memory >= 80GiB && node.labels.rack != "b"`.
//!
//! - attributes: `node.name`, `node.cpu` (cores), `node.memory` (bytes), `node.gpus` (count),
//!   `node.labels.<key>` or `node.labels["key"]`, `gpu.model`, `gpu.memory` (bytes), `gpu.index`, `gpu.uuid`;
//! - numbers with units (`80GiB`, `512MiB`, `2TB`), strings in `"…"` or `'…'`, `true`, `false`, lists `[…]`;
//! - arithmetic `+ - * / %`, comparisons `== != < <= > >=`, string operators `startswith`, `endswith`,
//!   `contains`, `matches` (a regular expression), membership `in [..]`, and `&&`, `||`, `!`.
//!
//! A missing label is null: it equals nothing (so `!=` holds) and every ordering with it is false.
//! Parse errors name the byte position and what was expected there.

mod ast;
mod lexer;
mod parser;
mod regex;

pub use ast::{Attr, BinOp, Expr};
pub use parser::parse;
pub use regex::Regex;

use crate::model::{Cluster, Gpu, Node};
use crate::state::{Shape, State};

/// A resource expression that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// The text does not parse.
    #[error("resource expression: at position {pos}: expected {expected}, found {found}")]
    Parse {
        /// Byte offset of the problem.
        pos: usize,
        /// What would have been valid there.
        expected: String,
        /// What is there.
        found: String,
    },
    /// A `matches` pattern does not compile.
    #[error("resource expression: bad pattern {pattern:?}: {reason}")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// Why.
        reason: String,
    },
}

impl ExprError {
    pub(crate) fn parse(pos: usize, expected: &str, found: &str) -> Self {
        ExprError::Parse { pos, expected: expected.to_owned(), found: found.to_owned() }
    }
}

/// A value during evaluation.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A number.
    Num(f64),
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// A list.
    List(Vec<Value>),
    /// Missing (an absent label, a GPU attribute where there is no GPU).
    Null,
}

impl Value {
    /// Whether the value counts as true: `true`, a non-zero number, a non-empty string or list.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Bool(b) => *b,
            Value::Num(n) => *n != 0.0 && !n.is_nan(),
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Null => false,
        }
    }

    fn equals(&self, o: &Value) -> bool {
        match (self, o) {
            (Value::Null, _) | (_, Value::Null) => false,
            (Value::Num(a), Value::Num(b)) => a == b,
            (Value::Str(a), Value::Str(b)) => a == b,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::List(a), Value::List(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.equals(y)),
            _ => false,
        }
    }
}

/// What an expression is evaluated against: a node and, optionally, one of its GPUs.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The node.
    pub node: &'a Node,
    /// The GPU, if any.
    pub gpu: Option<&'a Gpu>,
}

/// A parsed expression with its `matches` patterns compiled.
#[derive(Debug, Clone)]
pub struct Compiled {
    expr: Expr,
    patterns: Vec<(String, Regex)>,
}

fn collect_patterns(e: &Expr, out: &mut Vec<(String, Regex)>) -> Result<(), ExprError> {
    match e {
        Expr::Bin(op, a, b) => {
            if let (BinOp::Matches, Expr::Str(p)) = (op, b.as_ref()) {
                if !out.iter().any(|(q, _)| q == p) {
                    let r = Regex::new(p).map_err(|reason| ExprError::Pattern { pattern: p.clone(), reason })?;
                    out.push((p.clone(), r));
                }
            }
            collect_patterns(a, out)?;
            collect_patterns(b, out)
        }
        Expr::In(a, b) => {
            collect_patterns(a, out)?;
            collect_patterns(b, out)
        }
        Expr::Not(a) | Expr::Neg(a) => collect_patterns(a, out),
        Expr::List(l) => l.iter().try_for_each(|x| collect_patterns(x, out)),
        _ => Ok(()),
    }
}

impl Compiled {
    /// Parses and checks `src`.
    pub fn new(src: &str) -> Result<Self, ExprError> {
        let expr = parse(src)?;
        let mut patterns = Vec::new();
        collect_patterns(&expr, &mut patterns)?;
        Ok(Compiled { expr, patterns })
    }

    /// The syntax tree.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// Whether the expression holds for `ctx`.
    pub fn matches(&self, ctx: Context<'_>) -> bool {
        self.eval(&self.expr, ctx, 0).truthy()
    }

    /// Evaluates `e` (never panics; nonsense gives null).
    pub fn eval(&self, e: &Expr, ctx: Context<'_>, depth: u32) -> Value {
        if depth > 256 {
            return Value::Null;
        }
        let ev = |x: &Expr| self.eval(x, ctx, depth + 1);
        match e {
            Expr::Num(n) => Value::Num(*n),
            Expr::Str(s) => Value::Str(s.clone()),
            Expr::Bool(b) => Value::Bool(*b),
            Expr::List(l) => Value::List(l.iter().map(ev).collect()),
            Expr::Attr(a) => attr(a, ctx),
            Expr::Not(x) => Value::Bool(!ev(x).truthy()),
            Expr::Neg(x) => match ev(x) {
                Value::Num(n) => Value::Num(-n),
                _ => Value::Null,
            },
            Expr::In(a, b) => {
                let v = ev(a);
                Value::Bool(match ev(b) {
                    Value::List(l) => l.iter().any(|x| v.equals(x)),
                    Value::Str(s) => matches!(&v, Value::Str(x) if s.contains(x.as_str())),
                    _ => false,
                })
            }
            Expr::Bin(BinOp::And, a, b) => Value::Bool(ev(a).truthy() && ev(b).truthy()),
            Expr::Bin(BinOp::Or, a, b) => Value::Bool(ev(a).truthy() || ev(b).truthy()),
            Expr::Bin(op, a, b) => self.binary(*op, ev(a), ev(b)),
        }
    }

    fn binary(&self, op: BinOp, a: Value, b: Value) -> Value {
        use Value::{Bool, Null, Num, Str};
        match (op, &a, &b) {
            (BinOp::Eq, _, _) => Bool(a.equals(&b)),
            (BinOp::Ne, _, _) => Bool(!a.equals(&b)),
            (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge, Num(x), Num(y)) => Bool(order(op, x.partial_cmp(y))),
            (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge, Str(x), Str(y)) => Bool(order(op, Some(x.cmp(y)))),
            (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge, _, _) => Bool(false),
            (BinOp::StartsWith, Str(x), Str(y)) => Bool(x.starts_with(y.as_str())),
            (BinOp::EndsWith, Str(x), Str(y)) => Bool(x.ends_with(y.as_str())),
            (BinOp::Contains, Str(x), Str(y)) => Bool(x.contains(y.as_str())),
            (BinOp::Contains, Value::List(l), _) => Bool(l.iter().any(|v| v.equals(&b))),
            (BinOp::Matches, Str(x), Str(p)) => {
                let hit = match self.patterns.iter().find(|(q, _)| q == p) {
                    Some((_, r)) => r.is_match(x),
                    None => Regex::new(p).is_ok_and(|r| r.is_match(x)),
                };
                Bool(hit)
            }
            (BinOp::StartsWith | BinOp::EndsWith | BinOp::Contains | BinOp::Matches, _, _) => Bool(false),
            (BinOp::Add, Num(x), Num(y)) => Num(x + y),
            (BinOp::Add, Str(x), Str(y)) => Str(format!("{x}{y}")),
            (BinOp::Sub, Num(x), Num(y)) => Num(x - y),
            (BinOp::Mul, Num(x), Num(y)) => Num(x * y),
            (BinOp::Div, Num(x), Num(y)) if *y != 0.0 => Num(x / y),
            (BinOp::Rem, Num(x), Num(y)) if *y != 0.0 => Num(x % y),
            _ => Null,
        }
    }
}

fn order(op: BinOp, o: Option<std::cmp::Ordering>) -> bool {
    use std::cmp::Ordering::*;
    match (op, o) {
        (_, None) => false,
        (BinOp::Lt, Some(o)) => o == Less,
        (BinOp::Le, Some(o)) => o != Greater,
        (BinOp::Gt, Some(o)) => o == Greater,
        (BinOp::Ge, Some(o)) => o != Less,
        _ => false,
    }
}

fn attr(a: &Attr, ctx: Context<'_>) -> Value {
    let n = ctx.node;
    match a {
        Attr::NodeName => Value::Str(n.name.clone()),
        Attr::NodeCpu => Value::Num(n.cpu_milli as f64 / 1000.0),
        Attr::NodeMemory => Value::Num(n.memory as f64),
        Attr::NodeGpus => Value::Num(n.gpus.len() as f64),
        Attr::NodeLabel(k) => n.labels.get(k).map_or(Value::Null, |v| Value::Str(v.clone())),
        Attr::GpuModel => ctx.gpu.map_or(Value::Null, |g| Value::Str(g.model.clone())),
        Attr::GpuMemory => ctx.gpu.map_or(Value::Null, |g| Value::Num(g.memory as f64)),
        Attr::GpuIndex => ctx.gpu.map_or(Value::Null, |g| Value::Num(f64::from(g.index))),
        Attr::GpuUuid => ctx.gpu.map_or(Value::Null, |g| Value::Str(g.uuid.clone())),
    }
}

/// Restricts `s` to the nodes and GPUs of `cluster` that satisfy `src`: with GPU attributes, each GPU is
/// checked (and a request without GPUs needs a node with at least one matching GPU); otherwise each node.
pub fn constrain(src: &str, cluster: &Cluster, st: &State, s: &mut Shape) -> Result<(), ExprError> {
    let c = Compiled::new(src)?;
    if c.expr().uses_gpu() {
        let mut gpu_ok = vec![false; st.gpu_free.len()];
        let mut node_ok = vec![false; cluster.nodes.len()];
        for (n, node) in cluster.nodes.iter().enumerate() {
            let start = st.nodes[n].gpu_start as usize;
            for (k, g) in node.gpus.iter().enumerate() {
                let ok = c.matches(Context { node, gpu: Some(g) });
                gpu_ok[start + k] = ok;
                node_ok[n] |= ok;
            }
        }
        if s.count > 0 {
            s.gpu_ok = Some(gpu_ok);
        } else {
            s.node_ok = Some(node_ok);
        }
    } else {
        s.node_ok = Some(cluster.nodes.iter().map(|node| c.matches(Context { node, gpu: None })).collect());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
