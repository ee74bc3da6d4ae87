//! The syntax tree of resource expressions, and how it prints (fully parenthesised, so that printing
//! and parsing again gives the same tree).

use std::fmt;

/// An attribute of the node or GPU being considered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr {
    /// `node.name`.
    NodeName,
    /// `node.cpu`: cores (fractional).
    NodeCpu,
    /// `node.memory`: bytes.
    NodeMemory,
    /// `node.gpus`: number of GPUs.
    NodeGpus,
    /// `node.labels.<key>` or `node.labels["key"]`.
    NodeLabel(String),
    /// `gpu.model`.
    GpuModel,
    /// `gpu.memory`: bytes.
    GpuMemory,
    /// `gpu.index`.
    GpuIndex,
    /// `gpu.uuid`.
    GpuUuid,
}

impl Attr {
    /// Whether the attribute is about a GPU.
    pub fn is_gpu(&self) -> bool {
        matches!(self, Attr::GpuModel | Attr::GpuMemory | Attr::GpuIndex | Attr::GpuUuid)
    }

    /// The attribute for a dotted path, if it names one.
    pub fn from_path(path: &str) -> Option<Attr> {
        Some(match path {
            "node.name" => Attr::NodeName,
            "node.cpu" | "node.cpus" => Attr::NodeCpu,
            "node.memory" => Attr::NodeMemory,
            "node.gpus" => Attr::NodeGpus,
            "gpu.model" => Attr::GpuModel,
            "gpu.memory" => Attr::GpuMemory,
            "gpu.index" => Attr::GpuIndex,
            "gpu.uuid" => Attr::GpuUuid,
            _ => {
                let key = path.strip_prefix("node.labels.")?;
                if key.is_empty() {
                    return None;
                }
                Attr::NodeLabel(key.to_owned())
            }
        })
    }
}

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `startswith`
    StartsWith,
    /// `endswith`
    EndsWith,
    /// `contains`
    Contains,
    /// `matches` (a regular expression, searched anywhere unless anchored)
    Matches,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

impl BinOp {
    /// The operator's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::StartsWith => "startswith",
            BinOp::EndsWith => "endswith",
            BinOp::Contains => "contains",
            BinOp::Matches => "matches",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
        }
    }
}

/// An expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A number (units applied).
    Num(f64),
    /// A string.
    Str(String),
    /// `true` or `false`.
    Bool(bool),
    /// A node or GPU attribute.
    Attr(Attr),
    /// `[a, b, …]`
    List(Vec<Expr>),
    /// `!e`
    Not(Box<Expr>),
    /// `-e`
    Neg(Box<Expr>),
    /// `a op b`
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `e in [..]`
    In(Box<Expr>, Box<Expr>),
}

impl Expr {
    /// Whether any attribute in the expression is about a GPU.
    pub fn uses_gpu(&self) -> bool {
        match self {
            Expr::Attr(a) => a.is_gpu(),
            Expr::List(l) => l.iter().any(Expr::uses_gpu),
            Expr::Not(e) | Expr::Neg(e) => e.uses_gpu(),
            Expr::Bin(_, a, b) | Expr::In(a, b) => a.uses_gpu() || b.uses_gpu(),
            Expr::Num(_) | Expr::Str(_) | Expr::Bool(_) => false,
        }
    }
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::NodeName => f.write_str("node.name"),
            Attr::NodeCpu => f.write_str("node.cpu"),
            Attr::NodeMemory => f.write_str("node.memory"),
            Attr::NodeGpus => f.write_str("node.gpus"),
            Attr::NodeLabel(k) => write!(f, "node.labels[{}]", quote(k)),
            Attr::GpuModel => f.write_str("gpu.model"),
            Attr::GpuMemory => f.write_str("gpu.memory"),
            Attr::GpuIndex => f.write_str("gpu.index"),
            Attr::GpuUuid => f.write_str("gpu.uuid"),
        }
    }
}

/// A string literal with `"` and `\` escaped.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Num(n) => write!(f, "{n}"),
            Expr::Str(s) => f.write_str(&quote(s)),
            Expr::Bool(b) => write!(f, "{b}"),
            Expr::Attr(a) => write!(f, "{a}"),
            Expr::List(l) => {
                f.write_str("[")?;
                for (i, e) in l.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str("]")
            }
            Expr::Not(e) => write!(f, "(!({e}))"),
            Expr::Neg(e) => write!(f, "-({e})"),
            Expr::Bin(op, a, b) => write!(f, "({a} {} {b})", op.as_str()),
            Expr::In(a, b) => write!(f, "({a} in {b})"),
        }
    }
}
