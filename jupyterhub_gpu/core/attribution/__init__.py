"""Who uses a GPU: node-agent process readings attributed to containers and shares (pure)."""
