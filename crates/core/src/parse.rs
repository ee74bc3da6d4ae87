//! What people type, parsed the same way by the CLI's flags and the portal's form fields: a GPU ask,
//! `K=V`, an app declaration, a command line.

use crate::workload::AppSpec;

/// What `--gpus` (or the form's GPUs field) asks for: whole GPUs or a share of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuAsk {
    /// This many whole GPUs.
    Whole(u32),
    /// Thousandths of one GPU (1…999).
    Milli(u32),
}

/// A whole number of GPUs, or a share of one GPU below 1 (`0.25`, to a thousandth).
pub fn gpus(s: &str) -> Result<GpuAsk, String> {
    let s = s.trim();
    if let Ok(n) = s.parse::<u32>() {
        return Ok(GpuAsk::Whole(n));
    }
    let f: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of GPUs (2, or a share such as 0.25)"))?;
    if !(f > 0.0 && f < 1.0) {
        return Err(format!("{s:?}: a share of a GPU must be above 0 and below 1; whole GPUs are a whole number"));
    }
    let milli = (f * 1000.0).round();
    if (milli - f * 1000.0).abs() > 1e-6 || milli < 1.0 {
        return Err(format!("{s:?}: a share of a GPU is counted in thousandths (0.001 to 0.999)"));
    }
    Ok(GpuAsk::Milli(milli as u32))
}

/// `K=V` (an environment variable).
pub fn env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        Some(_) => Err(format!("{s:?} has an empty variable name (expected K=V)")),
        None => Err(format!("{s:?} is not K=V (no '=')")),
    }
}

/// `NAME:PORT` (an app the workload's own command serves).
pub fn app(s: &str) -> Result<AppSpec, String> {
    let (name, port) = s.split_once(':').ok_or_else(|| format!("{s:?} is not NAME:PORT"))?;
    let port = port.parse::<u16>().map_err(|_| format!("{s:?}: {port:?} is not a port number"))?;
    let app = AppSpec { name: name.to_owned(), port, command: Vec::new() };
    app.validate().map_err(|e| e.to_string())?;
    Ok(app)
}

/// `NAME:PORT[=COMMAND]` (an app of a catalog image, started by its own command).
pub fn catalog_app(s: &str) -> Result<AppSpec, String> {
    let (head, command) = s.split_once('=').unwrap_or((s, ""));
    let mut app = app(head)?;
    app.command = command.split_whitespace().map(str::to_owned).collect();
    Ok(app)
}

/// A command line split into arguments as a POSIX shell would split words: blanks separate, single
/// quotes keep everything, double quotes keep all but `\"` and `\\`, a backslash outside quotes keeps
/// the next character. No expansion of any kind.
pub fn words(s: &str) -> Result<Vec<String>, String> {
    let (mut out, mut cur, mut in_word) = (Vec::new(), String::new(), false);
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("a single quote is not closed".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("a double quote is not closed".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("a double quote is not closed".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push(c),
                    None => return Err("a backslash ends the line".into()),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_asks() {
        assert_eq!(gpus("0.5"), Ok(GpuAsk::Milli(500)));
        assert_eq!(gpus("0.001"), Ok(GpuAsk::Milli(1)));
        assert_eq!(gpus(" 8 "), Ok(GpuAsk::Whole(8)));
        for bad in ["1.5", "0.0001", "-1", "x", ""] {
            assert!(gpus(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn command_lines() {
        assert_eq!(words("python train.py --epochs 3").unwrap(), ["python", "train.py", "--epochs", "3"]);
        assert_eq!(words(r#"sh -c 'echo "a b"; exit 3'"#).unwrap(), ["sh", "-c", r#"echo "a b"; exit 3"#]);
        assert_eq!(words(r#"echo "x \"y\" \n" a\ b ''"#).unwrap(), ["echo", r#"x "y" \n"#, "a b", ""]);
        assert_eq!(words("  ").unwrap(), Vec::<String>::new());
        for bad in ["'open", "\"open", "end\\"] {
            assert!(words(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_and_apps() {
        assert_eq!(env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert!(env("=x").is_err() && env("x").is_err());
        let a = catalog_app("lab:8888=jupyter lab --port={port}").unwrap();
        assert_eq!((a.name.as_str(), a.port, a.command.len()), ("lab", 8888, 3));
        assert!(app("lab").is_err() && app("lab:http").is_err());
    }
}
