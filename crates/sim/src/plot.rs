//! SVG line plots with `plotters`.

use crate::SimError;
use plotters::prelude::*;
use std::path::Path;

/// Draws allocation ratio (%) against arrived demand (%), one line per named series.
pub fn draw(path: &Path, title: &str, lines: &[(String, Vec<[f64; 2]>)]) -> Result<(), SimError> {
    draw_xy(path, title, "arrived demand (% of GPU capacity)", lines)
}

/// Draws GPU allocation (%) against `xdesc`, one line per named series.
pub fn draw_xy(path: &Path, title: &str, xdesc: &str, lines: &[(String, Vec<[f64; 2]>)]) -> Result<(), SimError> {
    let err = |e: String| SimError::Plot { path: path.to_owned(), reason: e };
    let xmax = lines.iter().flat_map(|(_, l)| l.iter().map(|p| p[0])).fold(1.0, f64::max);
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..xmax, 0.0..100.0)
        .map_err(|e| err(e.to_string()))?;
    chart.configure_mesh().x_desc(xdesc).y_desc("GPU allocation ratio (%)").draw().map_err(|e| err(e.to_string()))?;
    for (i, (name, pts)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().map(|p| (p[0], p[1])), color.stroke_width(2)))
            .map_err(|e| err(e.to_string()))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// Averages `(x, y)` points into at most `buckets` points.
pub(crate) fn bucket(points: &[(f64, f64)], buckets: usize) -> Vec<[f64; 2]> {
    let Some(last) = points.last() else { return Vec::new() };
    let width = (last.0 / buckets as f64).max(1e-9);
    let mut out: Vec<[f64; 2]> = Vec::new();
    let mut acc = (0.0, 0usize, 0usize);
    for &(x, y) in points {
        let b = (x / width) as usize;
        if b != acc.2 && acc.1 > 0 {
            out.push([(acc.2 as f64 + 0.5) * width, acc.0 / acc.1 as f64]);
            acc = (0.0, 0, b);
        }
        acc.2 = b;
        acc.0 += y;
        acc.1 += 1;
    }
    if acc.1 > 0 {
        out.push([(acc.2 as f64 + 0.5) * width, acc.0 / acc.1 as f64]);
    }
    out
}
