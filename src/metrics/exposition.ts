/**
 * The Prometheus text exposition format (version 0.0.4), written by hand: counters, gauges
 * and histograms with labels, plus samples computed at scrape time (`Collector`) that may
 * carry a timestamp, as `/metrics/resource` needs.
 *
 * Why not prom-client: measured here, `import('prom-client')` with its default collectors
 * costs 160-173 ms and +13 MB RSS (more than nodelet's whole core set, ~146 ms), and since
 * v13 it cannot write sample timestamps, which the kubelet's resource metrics carry. The
 * format itself is the few functions below; tests parse it with Python's
 * prometheus_client, a parser nobody here wrote.
 *
 * Contract: families are registered once (a second registration of a name throws: a bug);
 * recording is O(1) map work on the hot path; `render()` is called per scrape.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram';
export type Labels = Readonly<Record<string, string>>;

/** One sample a collector produces at scrape time. */
export interface Sample {
  labels?: Labels;
  value: number;
  /** Milliseconds since the epoch; written as the sample's timestamp. */
  timestampMs?: number;
}

/** Something that writes its family text (HELP, TYPE, samples) at scrape time. */
export interface Family {
  readonly name: string;
  render(out: string[]): void;
}

const NAME_RE = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_RE = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** Go's %g-like number formatting the parsers accept: integers plain, +Inf/-Inf/NaN spelled out. */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

function escapeHelp(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

export function escapeLabelValue(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

function labelText(names: readonly string[], values: readonly string[], extra?: string): string {
  const parts = names.map((n, i) => `${n}="${escapeLabelValue(values[i] ?? '')}"`);
  if (extra) parts.push(extra);
  return parts.length ? `{${parts.join(',')}}` : '';
}

function header(out: string[], name: string, help: string, type: MetricType): void {
  out.push(`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${type}`);
}

function checkNames(name: string, labelNames: readonly string[]): void {
  if (!NAME_RE.test(name)) throw new Error(`invalid metric name ${name}`);
  for (const l of labelNames) if (!LABEL_RE.test(l) || l.startsWith('__')) throw new Error(`invalid label name ${l} on ${name}`);
}

abstract class LabelledFamily<S> implements Family {
  protected readonly series = new Map<string, { values: string[]; state: S }>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
  ) {
    checkNames(name, labelNames);
  }
  protected abstract fresh(): S;
  protected get(labels: Labels = {}): S {
    const values = this.labelNames.map((n) => labels[n] ?? '');
    const key = values.join('\u0000');
    let s = this.series.get(key);
    if (!s) {
      s = { values, state: this.fresh() };
      this.series.set(key, s);
    }
    return s.state;
  }
  abstract render(out: string[]): void;
}

export class Counter extends LabelledFamily<{ v: number }> {
  protected fresh() {
    return { v: 0 };
  }
  inc(labels?: Labels, by = 1): void {
    if (by < 0) throw new Error(`${this.name}: a counter only goes up`);
    this.get(labels).v += by;
  }
  value(labels?: Labels): number {
    return this.get(labels).v;
  }
  render(out: string[]): void {
    header(out, this.name, this.help, 'counter');
    for (const { values, state } of this.series.values()) out.push(`${this.name}${labelText(this.labelNames, values)} ${formatValue(state.v)}`);
  }
}

export class Gauge extends LabelledFamily<{ v: number }> {
  protected fresh() {
    return { v: 0 };
  }
  set(labels: Labels | undefined, v: number): void {
    this.get(labels).v = v;
  }
  value(labels?: Labels): number {
    return this.get(labels).v;
  }
  /** Drops every series (for gauges rebuilt from a full view, e.g. running containers by state). */
  reset(): void {
    this.series.clear();
  }
  render(out: string[]): void {
    header(out, this.name, this.help, 'gauge');
    for (const { values, state } of this.series.values()) out.push(`${this.name}${labelText(this.labelNames, values)} ${formatValue(state.v)}`);
  }
}

interface HistState {
  counts: number[];
  sum: number;
  count: number;
}

export class Histogram extends LabelledFamily<HistState> {
  readonly buckets: readonly number[];
  constructor(name: string, help: string, labelNames: readonly string[], buckets: readonly number[]) {
    super(name, help, labelNames);
    if (labelNames.includes('le')) throw new Error(`${name}: "le" is reserved in a histogram`);
    this.buckets = [...buckets].sort((a, b) => a - b);
  }
  protected fresh(): HistState {
    return { counts: this.buckets.map(() => 0), sum: 0, count: 0 };
  }
  observe(labels: Labels | undefined, v: number): void {
    const s = this.get(labels);
    s.sum += v;
    s.count++;
    // Non-cumulative per bucket here; render() accumulates.
    const i = this.buckets.findIndex((b) => v <= b);
    if (i >= 0) s.counts[i]!++;
  }
  /** Observations so far for these labels (tests, and the benchmark). */
  count(labels?: Labels): number {
    return this.get(labels).count;
  }
  render(out: string[]): void {
    header(out, this.name, this.help, 'histogram');
    for (const { values, state } of this.series.values()) {
      let acc = 0;
      this.buckets.forEach((b, i) => {
        acc += state.counts[i]!;
        out.push(`${this.name}_bucket${labelText(this.labelNames, values, `le="${formatValue(b)}"`)} ${acc}`);
      });
      out.push(`${this.name}_bucket${labelText(this.labelNames, values, 'le="+Inf"')} ${state.count}`);
      out.push(`${this.name}_sum${labelText(this.labelNames, values)} ${formatValue(state.sum)}`);
      out.push(`${this.name}_count${labelText(this.labelNames, values)} ${state.count}`);
    }
  }
}

/** A family whose samples are computed at scrape time (no state kept between scrapes). */
export class Collected implements Family {
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'counter' | 'gauge',
    readonly labelNames: readonly string[],
    private readonly collect: () => Iterable<Sample>,
  ) {
    checkNames(name, labelNames);
  }
  render(out: string[]): void {
    header(out, this.name, this.help, this.type);
    for (const s of this.collect()) {
      const values = this.labelNames.map((n) => s.labels?.[n] ?? '');
      out.push(`${this.name}${labelText(this.labelNames, values)} ${formatValue(s.value)}${s.timestampMs !== undefined ? ` ${Math.round(s.timestampMs)}` : ''}`);
    }
  }
}

/** Renders only families with samples from `samples` now (used per scrape for resource metrics). */
export function renderSamples(name: string, help: string, type: 'counter' | 'gauge', labelNames: readonly string[], samples: Iterable<Sample>, out: string[]): void {
  new Collected(name, help, type, labelNames, () => samples).render(out);
}

/** An ordered set of families; `render()` is the exposition body. */
export class Registry {
  readonly #families = new Map<string, Family>();
  register<F extends Family>(f: F): F {
    if (this.#families.has(f.name)) throw new Error(`metric ${f.name} registered twice`);
    this.#families.set(f.name, f);
    return f;
  }
  render(): string {
    const out: string[] = [];
    for (const f of this.#families.values()) f.render(out);
    return `${out.join('\n')}\n`;
  }
}

/** The exposition format's content type. */
export const EXPOSITION_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** Prometheus client_golang's DefBuckets. */
export const DEF_BUCKETS: readonly number[] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** client_golang's ExponentialBuckets(start, factor, count). */
export function exponentialBuckets(start: number, factor: number, count: number): number[] {
  const out: number[] = [];
  for (let i = 0, v = start; i < count; i++, v *= factor) out.push(Number(v.toPrecision(12)));
  return out;
}
