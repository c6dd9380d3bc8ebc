// What the pages find in the browser besides the standard DOM: plotly.js, loaded by a classic <script> (served from
// /vendor, absent where the server has no plotly), with the few calls the charts make.

/** A plotly trace or layout: plotly takes loose objects of many shapes, which these modules build and never read back. */
type PlotlyObject = Record<string, any>;

interface PlotlyApi {
  react(element: HTMLElement, traces: PlotlyObject[], layout: PlotlyObject, config: PlotlyObject): Promise<unknown>;
  downloadImage(element: HTMLElement, options: PlotlyObject): Promise<unknown>;
}

interface Window {
  Plotly?: PlotlyApi;
}
