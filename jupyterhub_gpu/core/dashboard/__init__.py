"""What one person sees on the dashboard (pure): views, charts, sparkline history and the
checks of an admin's input."""
