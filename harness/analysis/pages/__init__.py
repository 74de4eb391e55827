"""What people and CI read: report.html (`report`, its table and charts, the heatmap), summary.md, junit.xml and the
console (`ci_formats`, `alarm_formats`), the history page (`trend`), the dashboard over a nightly's history
(`dashboard`), the kernel and work sections, the words they share (`wording`), the charts (`charts`: plotly.js
figures), the one place pages are rendered (`render`: Jinja2, autoescaped) and `templates/`."""
