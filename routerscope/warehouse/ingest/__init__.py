"""Kafka → warehouse: the loader (effectively once), its parse worker and the rows it inserts."""
