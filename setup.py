"""The one compiled module: the record walk of the broker's LogValidator
(kafka_protocol/_record_walk.c; why C is said there).  Everything else is in pyproject.toml.

Build in place for a source checkout: ``python setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafka_protocol._record_walk",
            ["kafka_protocol/_record_walk.c"],
            extra_compile_args=["-std=c99", "-Wall", "-Wextra"],
        )
    ]
)
