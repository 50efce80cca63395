"""What one person sees on the dashboard (pure): the hub's cluster payload, typed
(:mod:`.payload`), the views of it, charts, sparkline history and the checks of an
admin's input."""
