"""What people and CI read: report.html (`report`, its table and plots, the heatmap), summary.md and junit.xml
(`ci_formats`, `alarm_formats`), the console (`report_console`), the history page (`trend`), the kernel and work
sections, the words they share (`wording`), and `templates/`."""
