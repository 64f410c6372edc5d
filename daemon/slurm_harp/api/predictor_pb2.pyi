from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Target(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TARGET_UNSPECIFIED: _ClassVar[Target]
    TARGET_TIME: _ClassVar[Target]
    TARGET_MEMORY: _ClassVar[Target]
    TARGET_CPUS: _ClassVar[Target]

class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_NONE: _ClassVar[Action]
    ACTION_ANNOTATE: _ClassVar[Action]
    ACTION_REWRITE: _ClassVar[Action]
    ACTION_SET_TIME_MIN: _ClassVar[Action]

class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REASON_UNSPECIFIED: _ClassVar[Reason]
    REASON_NO_MODEL: _ClassVar[Reason]
    REASON_COLD_USER: _ClassVar[Reason]
    REASON_POLICY_OFF: _ClassVar[Reason]
    REASON_SHADOW: _ClassVar[Reason]
    REASON_NOT_REQUESTED: _ClassVar[Reason]
    REASON_NO_GAIN: _ClassVar[Reason]
    REASON_BAD_REQUEST: _ClassVar[Reason]
    REASON_MODEL_ERROR: _ClassVar[Reason]
    REASON_GUARD_DOWN: _ClassVar[Reason]
    REASON_OPTED_OUT: _ClassVar[Reason]
TARGET_UNSPECIFIED: Target
TARGET_TIME: Target
TARGET_MEMORY: Target
TARGET_CPUS: Target
ACTION_NONE: Action
ACTION_ANNOTATE: Action
ACTION_REWRITE: Action
ACTION_SET_TIME_MIN: Action
REASON_UNSPECIFIED: Reason
REASON_NO_MODEL: Reason
REASON_COLD_USER: Reason
REASON_POLICY_OFF: Reason
REASON_SHADOW: Reason
REASON_NOT_REQUESTED: Reason
REASON_NO_GAIN: Reason
REASON_BAD_REQUEST: Reason
REASON_MODEL_ERROR: Reason
REASON_GUARD_DOWN: Reason
REASON_OPTED_OUT: Reason

class SubmitRequest(_message.Message):
    __slots__ = ("user_name", "user_id", "account", "partition", "qos", "job_name", "work_dir", "script_signature", "time_limit_minutes", "time_min_minutes", "mem_per_node_mb", "mem_per_cpu_mb", "min_cpus", "cpus_per_task", "num_tasks", "min_nodes", "gpus_per_node", "tres_per_node", "is_array", "submit_time", "default_time_limit_minutes")
    USER_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    WORK_DIR_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_MINUTES_FIELD_NUMBER: _ClassVar[int]
    TIME_MIN_MINUTES_FIELD_NUMBER: _ClassVar[int]
    MEM_PER_NODE_MB_FIELD_NUMBER: _ClassVar[int]
    MEM_PER_CPU_MB_FIELD_NUMBER: _ClassVar[int]
    MIN_CPUS_FIELD_NUMBER: _ClassVar[int]
    CPUS_PER_TASK_FIELD_NUMBER: _ClassVar[int]
    NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    MIN_NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    TRES_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    IS_ARRAY_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TIME_LIMIT_MINUTES_FIELD_NUMBER: _ClassVar[int]
    user_name: str
    user_id: int
    account: str
    partition: str
    qos: str
    job_name: str
    work_dir: str
    script_signature: str
    time_limit_minutes: int
    time_min_minutes: int
    mem_per_node_mb: int
    mem_per_cpu_mb: int
    min_cpus: int
    cpus_per_task: int
    num_tasks: int
    min_nodes: int
    gpus_per_node: int
    tres_per_node: str
    is_array: bool
    submit_time: int
    default_time_limit_minutes: int
    def __init__(self, user_name: _Optional[str] = ..., user_id: _Optional[int] = ..., account: _Optional[str] = ..., partition: _Optional[str] = ..., qos: _Optional[str] = ..., job_name: _Optional[str] = ..., work_dir: _Optional[str] = ..., script_signature: _Optional[str] = ..., time_limit_minutes: _Optional[int] = ..., time_min_minutes: _Optional[int] = ..., mem_per_node_mb: _Optional[int] = ..., mem_per_cpu_mb: _Optional[int] = ..., min_cpus: _Optional[int] = ..., cpus_per_task: _Optional[int] = ..., num_tasks: _Optional[int] = ..., min_nodes: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., tres_per_node: _Optional[str] = ..., is_array: _Optional[bool] = ..., submit_time: _Optional[int] = ..., default_time_limit_minutes: _Optional[int] = ...) -> None: ...

class TargetDecision(_message.Message):
    __slots__ = ("target", "action", "predicted", "quantile", "new_value", "reason", "model_version", "detail")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_FIELD_NUMBER: _ClassVar[int]
    QUANTILE_FIELD_NUMBER: _ClassVar[int]
    NEW_VALUE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    target: Target
    action: Action
    predicted: float
    quantile: float
    new_value: int
    reason: Reason
    model_version: str
    detail: str
    def __init__(self, target: _Optional[_Union[Target, str]] = ..., action: _Optional[_Union[Action, str]] = ..., predicted: _Optional[float] = ..., quantile: _Optional[float] = ..., new_value: _Optional[int] = ..., reason: _Optional[_Union[Reason, str]] = ..., model_version: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("targets", "user_message", "annotation", "mode")
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ANNOTATION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[TargetDecision]
    user_message: str
    annotation: str
    mode: str
    def __init__(self, targets: _Optional[_Iterable[_Union[TargetDecision, _Mapping]]] = ..., user_message: _Optional[str] = ..., annotation: _Optional[str] = ..., mode: _Optional[str] = ...) -> None: ...

class TrainingFacts(_message.Message):
    __slots__ = ("parameters", "precision", "optimizer", "zero_stage")
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    ZERO_STAGE_FIELD_NUMBER: _ClassVar[int]
    parameters: float
    precision: str
    optimizer: str
    zero_stage: int
    def __init__(self, parameters: _Optional[float] = ..., precision: _Optional[str] = ..., optimizer: _Optional[str] = ..., zero_stage: _Optional[int] = ...) -> None: ...

class AdviceRequest(_message.Message):
    __slots__ = ("job", "partitions", "deadline_minutes", "budget", "training", "exclusive")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MINUTES_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    job: SubmitRequest
    partitions: _containers.RepeatedScalarFieldContainer[str]
    deadline_minutes: float
    budget: float
    training: TrainingFacts
    exclusive: bool
    def __init__(self, job: _Optional[_Union[SubmitRequest, _Mapping]] = ..., partitions: _Optional[_Iterable[str]] = ..., deadline_minutes: _Optional[float] = ..., budget: _Optional[float] = ..., training: _Optional[_Union[TrainingFacts, _Mapping]] = ..., exclusive: _Optional[bool] = ...) -> None: ...

class AdviceOption(_message.Message):
    __slots__ = ("partition", "size", "cpus", "nodes", "gpus", "mem_per_node_mb", "evidence", "priced", "time_limit_minutes", "expected_minutes", "longest_minutes", "expected_cost", "rate", "expected_attempts", "p_unfinished", "note")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    MEM_PER_NODE_MB_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    PRICED_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_MINUTES_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_MINUTES_FIELD_NUMBER: _ClassVar[int]
    LONGEST_MINUTES_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_COST_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    P_UNFINISHED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    partition: str
    size: int
    cpus: int
    nodes: int
    gpus: int
    mem_per_node_mb: int
    evidence: str
    priced: bool
    time_limit_minutes: int
    expected_minutes: float
    longest_minutes: float
    expected_cost: float
    rate: float
    expected_attempts: float
    p_unfinished: float
    note: str
    def __init__(self, partition: _Optional[str] = ..., size: _Optional[int] = ..., cpus: _Optional[int] = ..., nodes: _Optional[int] = ..., gpus: _Optional[int] = ..., mem_per_node_mb: _Optional[int] = ..., evidence: _Optional[str] = ..., priced: _Optional[bool] = ..., time_limit_minutes: _Optional[int] = ..., expected_minutes: _Optional[float] = ..., longest_minutes: _Optional[float] = ..., expected_cost: _Optional[float] = ..., rate: _Optional[float] = ..., expected_attempts: _Optional[float] = ..., p_unfinished: _Optional[float] = ..., note: _Optional[str] = ...) -> None: ...

class Advice(_message.Message):
    __slots__ = ("user_name", "job_name", "unit", "currency", "evidence", "options", "cheapest", "fastest", "pareto", "notes")
    USER_NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    CURRENCY_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CHEAPEST_FIELD_NUMBER: _ClassVar[int]
    FASTEST_FIELD_NUMBER: _ClassVar[int]
    PARETO_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    user_name: str
    job_name: str
    unit: str
    currency: str
    evidence: str
    options: _containers.RepeatedCompositeFieldContainer[AdviceOption]
    cheapest: int
    fastest: int
    pareto: _containers.RepeatedScalarFieldContainer[int]
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, user_name: _Optional[str] = ..., job_name: _Optional[str] = ..., unit: _Optional[str] = ..., currency: _Optional[str] = ..., evidence: _Optional[str] = ..., options: _Optional[_Iterable[_Union[AdviceOption, _Mapping]]] = ..., cheapest: _Optional[int] = ..., fastest: _Optional[int] = ..., pareto: _Optional[_Iterable[int]] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...
