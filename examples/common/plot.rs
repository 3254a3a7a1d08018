//! The plot of a run's losses and memory, both modes overlaid (`<stem>.svg` in `--out`).

use std::ops::Range;
use std::path::Path;

use leanburn::StepReport;
use leanburn::{RunDir, RunOutcome};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::flags::Mode;

/// One mode's curves.
struct Curves {
    mode: &'static str,
    /// (step, loss) of every step that read its loss back.
    train: Vec<(f64, f64)>,
    /// The same against the training seconds before the step's end, each process's first
    /// step left out.
    train_by_time: Vec<(f64, f64)>,
    validation: Vec<(f64, f64)>,
    validation_by_time: Vec<(f64, f64)>,
    /// Steps the predict phase ran (its jumps, kept), and its rolled-back blocks.
    predicted: Vec<f64>,
    rolled_back: Vec<f64>,
    /// Device memory in use, where the backend has a pool.
    memory_mib: Vec<(f64, f64)>,
    /// What the device's pool holds, in use or kept for reuse (what the device lends it).
    reserved_mib: Vec<(f64, f64)>,
    /// The most bytes in use inside the steps (`--sample-pool-ms`), each process's first
    /// step (autotuning's buffers) left out.
    in_step_mib: Vec<(f64, f64)>,
    /// The process's resident memory, where it has none (host RAM).
    host_mib: Vec<(f64, f64)>,
}

/// Weight of the old value in the smoothed train loss (TensorBoard's default 0.6 is for
/// noisier, sparser logs; W&B's running average is about this).
const SMOOTHING: f64 = 0.9;

impl Curves {
    fn new(mode: Mode, records: &[StepReport], validations: &[leanburn::runner::ValidationPoint]) -> Option<Self> {
        let at = |r: &StepReport| r.step as f64 + 1.0;
        let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
        // Training seconds after each process's first step, whose time is mostly compiling
        // and tuning kernels (minutes on a cold GPU): the axis shows the pace of training.
        let mut seconds = 0.0;
        let elapsed: Vec<f64> = records
            .iter()
            .map(|r| {
                seconds += if r.first_in_process { 0.0 } else { r.seconds };
                seconds
            })
            .collect();
        // A validation's seconds count every step before it: take out the first steps'.
        let start_up_before = |step: usize| -> f64 {
            records.iter().filter(|r| r.first_in_process && r.step < step).map(|r| r.seconds).sum()
        };
        let finite = |r: &StepReport| r.loss.filter(|l| l.is_finite());
        Some(Curves {
            mode: mode.name(),
            train: records.iter().filter_map(|r| finite(r).map(|l| (at(r), l))).collect(),
            train_by_time: records.iter().zip(&elapsed).filter_map(|(r, t)| finite(r).map(|l| (*t, l))).collect(),
            validation: validations.iter().map(|p| (p.step as f64, p.validation.loss)).collect(),
            validation_by_time: validations
                .iter()
                .map(|p| ((p.train_seconds - start_up_before(p.step)).max(0.0), p.validation.loss))
                .collect(),
            predicted: records.iter().filter(|r| r.predicted && !r.rolled_back).map(at).collect(),
            rolled_back: records.iter().filter(|r| r.rolled_back).map(at).collect(),
            memory_mib: records.iter().filter_map(|r| r.memory.map(|m| (at(r), mib(m.bytes_in_use)))).collect(),
            reserved_mib: records.iter().filter_map(|r| r.memory.map(|m| (at(r), mib(m.bytes_reserved)))).collect(),
            in_step_mib: records
                .iter()
                .filter(|r| !r.first_in_process)
                .filter_map(|r| r.in_step_peak.map(|p| (at(r), mib(p.peak_in_use))))
                .collect(),
            host_mib: records.iter().filter_map(|r| r.host_memory.map(|m| (at(r), mib(m.resident)))).collect(),
        })
        .filter(|c| !c.train.is_empty())
    }
}

/// An exponential moving average of `points`' values, debiased at the start (as
/// TensorBoard smooths), at the same x.
fn smoothed(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut average = 0.0;
    let mut weight = 0.0;
    points
        .iter()
        .map(|&(x, y)| {
            average = SMOOTHING * average + (1.0 - SMOOTHING) * y;
            weight = SMOOTHING * weight + (1.0 - SMOOTHING);
            (x, average / weight)
        })
        .collect()
}

/// This run's curves from its outcome, and the other mode's from what its own process
/// left in `out` (if it ran there).
fn curves(out: &Path, mode: Mode, outcome: &RunOutcome) -> Vec<Curves> {
    let other = match mode {
        Mode::Hybrid => Mode::Full,
        Mode::Full => Mode::Hybrid,
    };
    let earlier = RunDir::existing(out, other.name()).history().unwrap_or_else(|err| {
        eprintln!("warning: the {} run in {} is left out of the plot: {err}", other.name(), out.display());
        Default::default()
    });
    let mut runs = vec![
        Curves::new(mode, &outcome.records, &outcome.validations),
        Curves::new(other, &earlier.records, &earlier.validations),
    ];
    runs.sort_by_key(|run| run.as_ref().map(|r| r.mode != "hybrid"));
    runs.into_iter().flatten().collect()
}

/// Every panel's axes, over all runs drawn.
struct Axes {
    max_step: f64,
    max_seconds: f64,
    /// The loss axis.
    low: f64,
    high: f64,
    max_mib: f64,
    /// Device memory where any run has it; otherwise the process's resident memory,
    /// labelled as host memory (the two are never drawn on one axis).
    has_device: bool,
    has_host: bool,
    has_in_step: bool,
}

impl Axes {
    fn over(runs: &[Curves]) -> Self {
        let max_step = runs.iter().flat_map(|r| r.train.iter().map(|p| p.0)).fold(1.0, f64::max);
        let seconds = runs.iter().flat_map(|r| r.train_by_time.iter().chain(&r.validation_by_time).map(|p| p.0));
        let losses = runs.iter().flat_map(|r| r.train.iter().chain(&r.validation).map(|p| p.1));
        let (low, high) = losses.fold((f64::MAX, f64::MIN), |(lo, hi), l| (lo.min(l), hi.max(l)));
        let has_device = runs.iter().any(|r| !r.memory_mib.is_empty());
        let mut axes = Axes {
            max_step,
            max_seconds: seconds.fold(1e-3, f64::max),
            low: low * 0.95,
            high: high * 1.02,
            max_mib: 1.0,
            has_device,
            has_host: runs.iter().any(|r| !r.host_mib.is_empty()),
            has_in_step: runs.iter().any(|r| !r.in_step_mib.is_empty()),
        };
        let drawn = |r: &Curves| {
            let memory = axes.memory(r).into_iter().chain(r.reserved_mib.clone()).chain(r.in_step_mib.clone());
            memory.map(|p| p.1).fold(1.0, f64::max)
        };
        axes.max_mib = runs.iter().map(drawn).fold(1.0, f64::max);
        axes
    }

    /// The run's memory curve this plot draws: in use on the device, or resident on the host.
    fn memory(&self, run: &Curves) -> Vec<(f64, f64)> {
        if self.has_device {
            run.memory_mib.clone()
        } else {
            run.host_mib.clone()
        }
    }

    fn memory_caption(&self) -> &'static str {
        match (self.has_device, self.has_host) {
            (true, _) if self.has_in_step => {
                "device memory: in use after each step, its peak inside the step, the pool's reserve (MiB)"
            }
            (true, _) => "device memory: in use after each step, and the pool's reserve (MiB)",
            (false, true) => "host memory, process resident (MiB); no device pool on this backend",
            (false, false) => "device memory in use: not available on this backend",
        }
    }
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
type Plotted = Result<(), Box<dyn std::error::Error>>;

/// One axis of a panel: its range and description, how many labels (plotters' default
/// where `None`), how a label reads.
struct Axis<'f> {
    range: Range<f64>,
    desc: &'f str,
    labels: Option<usize>,
    format: &'f dyn Fn(&f64) -> String,
}

/// One panel of the plot, its mesh drawn.
fn panel<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    size: u32,
    x: Axis,
    y: Axis,
) -> Result<Chart<'a, 'b>, Box<dyn std::error::Error>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", size))
        .margin(10)
        .margin_right(30)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(x.range, y.range)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x.desc).y_desc(y.desc).x_label_formatter(x.format).y_label_formatter(y.format);
    if let Some(labels) = x.labels {
        mesh.x_labels(labels);
    }
    mesh.draw()?;
    Ok(chart)
}

/// A run's train loss (raw, faint, under its smoothed line) and validation loss.
fn draw_losses(
    chart: &mut Chart,
    mode: &str,
    train: &[(f64, f64)],
    validation: &[(f64, f64)],
    colour: RGBAColor,
) -> Plotted {
    chart.draw_series(LineSeries::new(train.iter().copied(), colour.mix(0.2)))?;
    chart
        .draw_series(LineSeries::new(smoothed(train), colour.mix(0.8)))?
        .label(format!("{mode} train (smoothed; raw faint)"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.mix(0.8)));
    chart
        .draw_series(LineSeries::new(validation.iter().copied(), colour.stroke_width(2)))?
        .label(format!("{mode} validation"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
    Ok(())
}

/// The rugs of a run's predicted steps and rolled-back blocks, at the bottom of the loss panel.
fn draw_rugs(chart: &mut Chart, run: &Curves, colour: RGBAColor, axes: &Axes) -> Plotted {
    let (low, high) = (axes.low, axes.high);
    let rug = |step: f64, height: f64, style: ShapeStyle| {
        PathElement::new(vec![(step, low), (step, low + (high - low) * height)], style)
    };
    let rugs = [
        (&run.predicted, 0.04, colour.stroke_width(1), "predicted steps"),
        (&run.rolled_back, 0.08, RED.stroke_width(2), "rolled-back blocks"),
    ];
    for (steps, height, style, what) in rugs {
        if !steps.is_empty() {
            chart
                .draw_series(steps.iter().map(|&step| rug(step, height, style)))?
                .label(format!("{}: {what}", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x + 10, y - 5), (x + 10, y + 5)], style));
        }
    }
    Ok(())
}

/// A run's memory: in use (or resident), and on a device the pool's reserve and the
/// in-step peak where sampled.
fn draw_memory(chart: &mut Chart, run: &Curves, colour: RGBAColor, axes: &Axes) -> Plotted {
    let in_use = if axes.has_device { format!("{} in use", run.mode) } else { run.mode.to_string() };
    chart
        .draw_series(LineSeries::new(axes.memory(run), colour))?
        .label(in_use)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    if axes.has_device {
        // The reserve holds the steps' in-step peak (activations are freed by the time
        // a step's sample is read): what the device lends the pool, as nvidia-smi sees it.
        let dashed = colour.mix(0.5).stroke_width(2);
        chart
            .draw_series(LineSeries::new(run.reserved_mib.clone(), dashed))?
            .label(format!("{} reserved", run.mode))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], dashed));
    }
    if !run.in_step_mib.is_empty() {
        // What the steps hold at once (read during them): the reserve above it is the
        // pool's own overhead, below it the pool could not have served the step.
        let thin = colour.mix(0.7).stroke_width(1);
        chart
            .draw_series(LineSeries::new(run.in_step_mib.clone(), thin))?
            .label(format!("{} in-step peak", run.mode))
            .legend(move |(x, y)| PathElement::new(vec![(x, y - 3), (x + 20, y - 3)], thin));
    }
    Ok(())
}

/// Loss against step (top: each run's raw train loss, faint, under its smoothed line, its
/// validation loss, and a rug of the steps its predict phase ran or rolled back), loss
/// against training seconds (middle: hybrid's promise is time), and memory against step
/// (bottom: device memory in use and the pool's reserve, or the process's resident memory
/// where the backend has no pool) for every run in `runs`, written as SVG to `path`;
/// returns the modes drawn.
fn write_plot(runs: &[Curves], path: &Path, model: &str) -> Result<Vec<&'static str>, Box<dyn std::error::Error>> {
    if runs.is_empty() {
        return Err("no metrics to plot".into());
    }
    let axes = Axes::over(runs);
    // Whole steps on the step axes; two decimals elsewhere (so no label reads "500.0").
    let whole = |x: &f64| format!("{x:.0}");
    let loss_label = |y: &f64| format!("{y:.2}");
    let max_seconds = axes.max_seconds;
    let seconds_label = move |x: &f64| if max_seconds >= 10.0 { format!("{x:.0}") } else { format!("{x:.2}") };
    let labels = Some((axes.max_step as usize).clamp(1, 10));
    let steps = || Axis { range: 0.0..axes.max_step, desc: "step", labels, format: &whole };
    let losses = || Axis { range: axes.low..axes.high, desc: "loss", labels: None, format: &loss_label };
    let seconds = Axis {
        range: 0.0..max_seconds,
        desc: "training seconds after the first step",
        labels: None,
        format: &seconds_label,
    };
    let mebibytes = Axis { range: 0.0..axes.max_mib * 1.1, desc: "MiB", labels: None, format: &whole };

    let root = SVGBackend::new(path, (900, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(400);
    let (middle, bottom) = rest.split_vertically(330);
    let mut loss_chart = panel(&top, &format!("{model}: loss against step"), 20, steps(), losses())?;
    let mut time_chart = panel(&middle, "loss against training seconds", 16, seconds, losses())?;
    let mut memory_chart = panel(&bottom, axes.memory_caption(), 16, steps(), mebibytes)?;

    for (index, run) in runs.iter().enumerate() {
        let colour = Palette99::pick(index * 2).to_rgba();
        draw_losses(&mut loss_chart, run.mode, &run.train, &run.validation, colour)?;
        draw_losses(&mut time_chart, run.mode, &run.train_by_time, &run.validation_by_time, colour)?;
        draw_rugs(&mut loss_chart, run, colour, &axes)?;
        draw_memory(&mut memory_chart, run, colour, &axes)?;
    }
    for chart in [&mut loss_chart, &mut time_chart, &mut memory_chart] {
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    }
    root.present()?;
    Ok(runs.iter().map(|r| r.mode).collect())
}

/// Writes the plot of this run (`mode`, `outcome`) and of the other mode's run in `out`,
/// if there is one, into `out` as `<file_stem>.svg`, and says where, or warns why not.
pub fn plot_runs(out: &Path, mode: Mode, outcome: &RunOutcome, file_stem: &str, model: &str) {
    let plot = out.join(format!("{file_stem}.svg"));
    match write_plot(&curves(out, mode, outcome), &plot, model) {
        Ok(modes) => println!("plot: {} ({})", plot.display(), modes.join(" and ")),
        Err(err) => eprintln!("warning: no plot written: {err}"),
    }
}
