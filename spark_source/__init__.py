"""PySpark data source reading committed records (later issue)."""
