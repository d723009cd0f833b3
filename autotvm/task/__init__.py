"""Tasks and spaces: what is tuned and which knobs it has."""

from .space import (AnnotateEntity, ConfigEntity, ConfigSpace, InstantiationError, OtherOptionEntity,
                    ReorderEntity, SplitEntity)
from .task import Task, TemplateTask, create, get_config, template
from .trace_task import TraceTask, create_from_primfunc
from .relax_integration import extract_from_program

__all__ = ["AnnotateEntity", "ConfigEntity", "ConfigSpace", "InstantiationError", "OtherOptionEntity",
           "ReorderEntity", "SplitEntity", "Task", "TemplateTask", "TraceTask", "create", "create_from_primfunc",
           "extract_from_program", "get_config", "template"]
