"""One query module per entity; values always bound as {name:Type} parameters."""
