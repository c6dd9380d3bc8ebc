// Plotly charts with one look, PNG and SVG downloads, and a message instead when plotly.js is missing.

// Okabe and Ito's colours, told apart with the common colour blindnesses; one per series, in order.
export const COLOURS = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000', '#999999'];

const CONFIG = {
  responsive: true,
  displaylogo: false,
  modeBarButtonsToRemove: ['select2d', 'lasso2d'],
};

const plotly = () => window.Plotly;

export function draw(id, traces, layout = {}) {
  const element = document.getElementById(id);
  if (!plotly()) {
    element.textContent = 'Charts need plotly.js, which the server could not serve: install plotly beside the server.';
    return;
  }
  const empty = !traces.some((trace) => trace.x?.length);
  const base = {
    margin: { l: 64, r: 12, t: 12, b: 48 },
    font: { family: 'system-ui, sans-serif', size: 12, color: '#1b1f24' },
    legend: { orientation: 'h', y: -0.22 },
    hovermode: 'closest',
    annotations: empty
      ? [{ text: 'No figures yet', showarrow: false, xref: 'paper', yref: 'paper', x: 0.5, y: 0.5, font: { size: 14 } }]
      : [],
  };
  plotly().react(element, traces, { ...base, ...layout, xaxis: { automargin: true, ...layout.xaxis },
    yaxis: { automargin: true, ...layout.yaxis } }, CONFIG);
}

// Buttons beside each chart's caption: <span class="downloads" data-chart="ID">.
export function addDownloads(filePrefix) {
  for (const holder of document.querySelectorAll('.downloads[data-chart]')) {
    const id = holder.dataset.chart;
    const caption = holder.closest('figcaption')?.firstElementChild?.textContent ?? id;
    for (const format of ['png', 'svg']) {
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'small secondary';
      button.textContent = format.toUpperCase();
      button.setAttribute('aria-label', `Download “${caption}” as ${format.toUpperCase()}`);
      button.addEventListener('click', () => {
        plotly()?.downloadImage(document.getElementById(id), {
          format, filename: `${filePrefix}-${id.replace(/^chart-/, '')}`, width: 1000, height: 600,
        });
      });
      holder.append(button);
    }
  }
}
