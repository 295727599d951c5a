"""CRD generation: pydantic JSON schema -> structural OpenAPI -> CustomResourceDefinition YAML."""

from paged_platform.crd.generate import crd, crd_yaml, openapi_schema
from paged_platform.crd.openapi import SchemaConversionError, to_structural

__all__ = ["SchemaConversionError", "crd", "crd_yaml", "openapi_schema", "to_structural"]
