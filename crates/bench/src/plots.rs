//! The report's plots (SVG through plotters, PNG through rsvg-convert).

use crate::error::Failure;
use crate::measure::*;
use crate::report::*;
use crate::stats::*;
use std::collections::BTreeMap;
use std::path::Path;

/// The report and its plots, in `dir`.
pub(crate) fn write_report(
    dir: &Path,
    report: &str,
    runs: &BTreeMap<&'static str, Vec<Figures>>,
) -> Result<(), Failure> {
    std::fs::create_dir_all(dir).map_err(|e| Failure::runtime(format!("{}: {e}", dir.display())))?;
    std::fs::write(dir.join("report.md"), report).map_err(|e| Failure::runtime(e.to_string()))?;
    let (svg, svg2) = (dir.join("rate.svg"), dir.join("latency.svg"));
    rate_plot(&svg, runs)?;
    latency_plot(&svg2, runs)?;
    to_png(&[&svg, &svg2]);
    Ok(())
}

/// The implementations' colours in the plots.
const COLORS: [(&str, plotters::style::RGBColor); 3] =
    [("shipworm", plotters::style::RED), ("miredo", plotters::style::BLUE), ("kernel", plotters::style::BLACK)];

/// Rate against packet size.
fn rate_plot(svg: &Path, runs: &BTreeMap<&'static str, Vec<Figures>>) -> Result<(), Failure> {
    use plotters::prelude::*;
    let colors = COLORS;
    let root = SVGBackend::new(svg, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| Failure::runtime(e.to_string()))?;
    let top = runs.values().flatten().flat_map(|f| f.rate.values().flatten().copied()).fold(1.0, f64::max) * 1.1;
    let mut c = ChartBuilder::on(&root)
        .caption("highest rate with < 0.1 % loss", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..1344f64, 0f64..top)
        .map_err(|e| Failure::runtime(e.to_string()))?;
    c.configure_mesh()
        .x_desc("IPv6 packet size (bytes)")
        .y_desc("packets/s")
        .draw()
        .map_err(|e| Failure::runtime(e.to_string()))?;
    for (name, color) in colors {
        let Some(v) = runs.get(name) else { continue };
        for (dir, style) in [("Teredo→IPv6", color.stroke_width(2)), ("IPv6→Teredo", color.stroke_width(1))] {
            let pts = SIZES.iter().map(|&s| (s as f64, rate_of(v, (dir, s))));
            // A quick run measures one size: the others are not points.
            let pts: Vec<(f64, f64)> = pts.filter(|(_, r)| r.is_finite()).collect();
            c.draw_series(LineSeries::new(pts, style))
                .map_err(|e| Failure::runtime(e.to_string()))?
                .label(format!("{name} {dir}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
    }
    finish(&mut c, &root)
}

/// Latency histograms, 1280-byte packets, decapsulation.
fn latency_plot(svg2: &Path, runs: &BTreeMap<&'static str, Vec<Figures>>) -> Result<(), Failure> {
    use plotters::prelude::*;
    let colors = COLORS;
    let root = SVGBackend::new(svg2, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| Failure::runtime(e.to_string()))?;
    let key = ("Teredo→IPv6", 1280);
    let hi = runs.values().map(|v| pct(&all_lat(v, key), 0.99)).filter(|x| x.is_finite()).fold(10.0, f64::max) * 1.2;
    let bins = 60usize;
    let hist = |v: &[f64]| -> Vec<(f64, f64)> {
        let mut h = vec![0f64; bins];
        for &x in v {
            let b = ((x / hi) * bins as f64) as usize;
            if b < bins {
                h[b] += 1.0;
            }
        }
        let n = v.len().max(1) as f64;
        h.iter().enumerate().map(|(i, c)| ((i as f64 + 0.5) * hi / bins as f64, c / n * 100.0)).collect()
    };
    let top = runs.values().flat_map(|v| hist(&all_lat(v, key))).map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let mut c = ChartBuilder::on(&root)
        .caption("latency per traversal, Teredo→IPv6, 1280-byte packets", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..hi, 0f64..top)
        .map_err(|e| Failure::runtime(e.to_string()))?;
    c.configure_mesh().x_desc("µs").y_desc("% of packets").draw().map_err(|e| Failure::runtime(e.to_string()))?;
    for (name, color) in colors {
        let Some(v) = runs.get(name) else { continue };
        c.draw_series(LineSeries::new(hist(&all_lat(v, key)), color.stroke_width(2)))
            .map_err(|e| Failure::runtime(e.to_string()))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    finish(&mut c, &root)
}

/// The legend drawn, and the plot written.
fn finish<'a, DB: plotters::prelude::DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    c: &mut plotters::chart::ChartContext<'a, DB, CT>,
    root: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), Failure> {
    use plotters::prelude::*;
    c.configure_series_labels()
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(|e| Failure::runtime(e.to_string()))?;
    root.present().map_err(|e| Failure::runtime(e.to_string()))
}

/// Each SVG also as PNG (rsvg-convert), said where it cannot be.
fn to_png(svgs: &[&Path]) {
    for s in svgs {
        let png = s.with_extension("png");
        let ok = std::process::Command::new("rsvg-convert")
            .arg("-o")
            .arg(&png)
            .arg(s)
            .status()
            .map(|st| st.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("note: rsvg-convert (apt-get install librsvg2-bin) is needed to turn {} into PNG", s.display());
        }
    }
}
