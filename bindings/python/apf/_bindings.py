"""ctypes declarations generated from include/apf.h by tools/gen_bindings.py.

Do not edit: run `python3 tools/gen_bindings.py` after a header change.
"""
# fmt: off
# ruff: noqa
import ctypes

# Constants (#define)
APF_VERSION_MAJOR = 0
APF_VERSION_MINOR = 3
APF_VERSION_PATCH = 0
APF_VERSION_NUMBER = 768

# enum apf_status
APF_OK = 0
APF_ERR_INVALID_PARAMETER = 7000
APF_ERR_NULL_POINTER = 7001
APF_ERR_INVALID_UTF8 = 7002
APF_ERR_PANIC = 7003
APF_ERR_INVALID_HANDLE = 7004
APF_ERR_REQUEST_QUEUED = 7005
APF_ERR_REQUEST_REJECTED = 7006
APF_ERR_REQUEST_EXECUTING = 7007
APF_ERR_CONFIG = 7008
APF_ERR_NOT_MANUAL_CLOCK = 7009
APF_ERR_INSUFFICIENT_SIZE = 7010
APF_ERR_IO = 7011
APF_ERR_TOO_MANY_REQUESTS = 7012
APF_ERR_IN_CALLBACK = 7013
APF_ERR_WORKQUEUE_WRONG_KIND = 7014
apf_status_NAMES = {
    0: 'APF_OK',
    7000: 'APF_ERR_INVALID_PARAMETER',
    7001: 'APF_ERR_NULL_POINTER',
    7002: 'APF_ERR_INVALID_UTF8',
    7003: 'APF_ERR_PANIC',
    7004: 'APF_ERR_INVALID_HANDLE',
    7005: 'APF_ERR_REQUEST_QUEUED',
    7006: 'APF_ERR_REQUEST_REJECTED',
    7007: 'APF_ERR_REQUEST_EXECUTING',
    7008: 'APF_ERR_CONFIG',
    7009: 'APF_ERR_NOT_MANUAL_CLOCK',
    7010: 'APF_ERR_INSUFFICIENT_SIZE',
    7011: 'APF_ERR_IO',
    7012: 'APF_ERR_TOO_MANY_REQUESTS',
    7013: 'APF_ERR_IN_CALLBACK',
    7014: 'APF_ERR_WORKQUEUE_WRONG_KIND',
}

# enum apf_outcome
APF_OUTCOME_EXECUTE = 0
APF_OUTCOME_QUEUED = 1
APF_OUTCOME_REJECTED = 2
apf_outcome_NAMES = {
    0: 'APF_OUTCOME_EXECUTE',
    1: 'APF_OUTCOME_QUEUED',
    2: 'APF_OUTCOME_REJECTED',
}

# enum apf_reject_reason
APF_REJECT_NONE = 0
APF_REJECT_QUEUE_FULL = 1
APF_REJECT_TIME_OUT = 2
APF_REJECT_CANCELLED = 3
APF_REJECT_CONCURRENCY_LIMIT = 4
APF_REJECT_LEVEL_FAILED = 5
apf_reject_reason_NAMES = {
    0: 'APF_REJECT_NONE',
    1: 'APF_REJECT_QUEUE_FULL',
    2: 'APF_REJECT_TIME_OUT',
    3: 'APF_REJECT_CANCELLED',
    4: 'APF_REJECT_CONCURRENCY_LIMIT',
    5: 'APF_REJECT_LEVEL_FAILED',
}

# enum apf_workqueue_kind
APF_WORKQUEUE_FIFO = 0
APF_WORKQUEUE_TWO_LANE = 1
APF_WORKQUEUE_PRIORITY = 2
apf_workqueue_kind_NAMES = {
    0: 'APF_WORKQUEUE_FIFO',
    1: 'APF_WORKQUEUE_TWO_LANE',
    2: 'APF_WORKQUEUE_PRIORITY',
}

# enum apf_workqueue_lane
APF_WORKQUEUE_LANE_FAST = 0
APF_WORKQUEUE_LANE_SLOW = 1
apf_workqueue_lane_NAMES = {
    0: 'APF_WORKQUEUE_LANE_FAST',
    1: 'APF_WORKQUEUE_LANE_SLOW',
}

# enum apf_workqueue_get_result
APF_WORKQUEUE_ITEM = 0
APF_WORKQUEUE_EMPTY = 1
APF_WORKQUEUE_SHUT_DOWN = 2
APF_WORKQUEUE_TIMED_OUT = 3
apf_workqueue_get_result_NAMES = {
    0: 'APF_WORKQUEUE_ITEM',
    1: 'APF_WORKQUEUE_EMPTY',
    2: 'APF_WORKQUEUE_SHUT_DOWN',
    3: 'APF_WORKQUEUE_TIMED_OUT',
}

# enum apf_fairness
APF_FAIRNESS_KUBERNETES = 0
APF_FAIRNESS_FLOW = 1
APF_FAIRNESS_FLOW_MAXMIN = 2
apf_fairness_NAMES = {
    0: 'APF_FAIRNESS_KUBERNETES',
    1: 'APF_FAIRNESS_FLOW',
    2: 'APF_FAIRNESS_FLOW_MAXMIN',
}

class apf_dispatcher(ctypes.Structure):
    pass

class apf_error(ctypes.Structure):
    pass

class apf_queueset(ctypes.Structure):
    pass

class apf_rate_limiter(ctypes.Structure):
    pass

class apf_workqueue(ctypes.Structure):
    pass

class apf_adaptive_options(ctypes.Structure):
    pass

class apf_adaptive_state(ctypes.Structure):
    pass

class apf_dispatcher_options(ctypes.Structure):
    pass

class apf_text(ctypes.Structure):
    pass

class apf_str(ctypes.Structure):
    pass

class apf_request_info(ctypes.Structure):
    pass

class apf_request_digest(ctypes.Structure):
    pass

class apf_work_estimate(ctypes.Structure):
    pass

class apf_decision_ids(ctypes.Structure):
    pass

class apf_metrics_label(ctypes.Structure):
    pass

class apf_metrics_options(ctypes.Structure):
    pass

class apf_queueset_config(ctypes.Structure):
    pass

class apf_queueset_decision(ctypes.Structure):
    pass

class apf_queueset_stats(ctypes.Structure):
    pass

class apf_decision(ctypes.Structure):
    pass

class apf_workqueue_options(ctypes.Structure):
    pass

class apf_workqueue_add_options(ctypes.Structure):
    pass

class apf_workqueue_item(ctypes.Structure):
    pass

apf_status = ctypes.c_uint32
apf_outcome = ctypes.c_uint32
apf_reject_reason = ctypes.c_uint32
apf_workqueue_kind = ctypes.c_uint32
apf_workqueue_lane = ctypes.c_uint32
apf_workqueue_get_result = ctypes.c_uint32
apf_fairness = ctypes.c_uint32

apf_completion_callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64)

apf_adaptive_options._fields_ = [
    ('struct_size', ctypes.c_size_t),
    ('min_limit', ctypes.c_uint32),
    ('max_limit', ctypes.c_uint32),
    ('update_interval_ns', ctypes.c_uint64),
    ('tolerance_percent', ctypes.c_uint32),
    ('smoothing_percent', ctypes.c_uint32),
    ('gain', ctypes.c_uint32),
    ('min_window_samples', ctypes.c_uint32),
    ('probe_interval_ns', ctypes.c_uint64),
    ('probe_limit', ctypes.c_uint32),
    ('probe_samples', ctypes.c_uint32),
    ('probe_timeout_ns', ctypes.c_uint64),
]

apf_adaptive_state._fields_ = [
    ('enabled', ctypes.c_bool),
    ('probing', ctypes.c_bool),
    ('limit', ctypes.c_uint32),
    ('estimate', ctypes.c_double),
    ('min_latency_ns', ctypes.c_uint64),
    ('latency_ns', ctypes.c_uint64),
    ('gradient', ctypes.c_double),
    ('probes', ctypes.c_uint64),
    ('updates', ctypes.c_uint64),
]

apf_dispatcher_options._fields_ = [
    ('struct_size', ctypes.c_size_t),
    ('server_concurrency_limit', ctypes.c_uint32),
    ('service_time_guess_ns', ctypes.c_uint64),
    ('wait_limit_ns', ctypes.c_uint64),
    ('borrowing_period_ns', ctypes.c_uint64),
    ('manual_clock', ctypes.c_bool),
    ('adaptive', ctypes.POINTER(apf_adaptive_options)),
]

apf_text._fields_ = [
    ('ptr', ctypes.POINTER(ctypes.c_char)),
    ('len', ctypes.c_size_t),
]

apf_str._fields_ = [
    ('ptr', ctypes.POINTER(ctypes.c_char)),
    ('len', ctypes.c_size_t),
]

apf_request_info._fields_ = [
    ('verb', apf_text),
    ('is_resource_request', ctypes.c_bool),
    ('api_group', apf_str),
    ('resource', apf_str),
    ('subresource', apf_str),
    ('namespace_', apf_str),
    ('name', apf_str),
    ('path', apf_str),
]

apf_request_digest._fields_ = [
    ('user', ctypes.POINTER(ctypes.c_char)),
    ('user_len', ctypes.c_size_t),
    ('verb', ctypes.POINTER(ctypes.c_char)),
    ('verb_len', ctypes.c_size_t),
    ('api_group', ctypes.POINTER(ctypes.c_char)),
    ('api_group_len', ctypes.c_size_t),
    ('resource', ctypes.POINTER(ctypes.c_char)),
    ('resource_len', ctypes.c_size_t),
    ('subresource', ctypes.POINTER(ctypes.c_char)),
    ('subresource_len', ctypes.c_size_t),
    ('namespace_', ctypes.POINTER(ctypes.c_char)),
    ('namespace_len', ctypes.c_size_t),
    ('name', ctypes.POINTER(ctypes.c_char)),
    ('name_len', ctypes.c_size_t),
    ('path', ctypes.POINTER(ctypes.c_char)),
    ('path_len', ctypes.c_size_t),
    ('groups', ctypes.POINTER(apf_str)),
    ('n_groups', ctypes.c_size_t),
    ('is_resource_request', ctypes.c_bool),
]

apf_work_estimate._fields_ = [
    ('initial_seats', ctypes.c_uint32),
    ('final_seats', ctypes.c_uint32),
    ('additional_latency_nanos', ctypes.c_uint64),
]

apf_decision_ids._fields_ = [
    ('struct_size', ctypes.c_size_t),
    ('outcome', ctypes.c_uint32),
    ('reject_reason', ctypes.c_uint32),
    ('request', ctypes.c_uint64),
    ('flow_schema_id', ctypes.c_uint32),
    ('priority_level_id', ctypes.c_uint32),
]

apf_metrics_label._fields_ = [
    ('name', apf_str),
    ('value', apf_str),
]

apf_metrics_options._fields_ = [
    ('struct_size', ctypes.c_size_t),
    ('prefix', apf_str),
    ('const_labels', ctypes.POINTER(apf_metrics_label)),
    ('const_labels_len', ctypes.c_size_t),
]

apf_queueset_config._fields_ = [
    ('struct_size', ctypes.c_size_t),
    ('concurrency_limit', ctypes.c_uint32),
    ('queues', ctypes.c_uint32),
    ('hand_size', ctypes.c_uint32),
    ('queue_length_limit', ctypes.c_uint32),
    ('service_time_guess_ns', ctypes.c_uint64),
    ('wait_limit_ns', ctypes.c_uint64),
    ('fairness', ctypes.c_uint32),
]

apf_queueset_decision._fields_ = [
    ('outcome', ctypes.c_uint32),
    ('reject_reason', ctypes.c_uint32),
    ('request', ctypes.c_uint64),
    ('waiting_id', ctypes.c_uint64),
    ('queue_length', ctypes.c_uint32),
    ('queue', ctypes.c_uint32),
    ('current_r', ctypes.c_double),
]

apf_queueset_stats._fields_ = [
    ('concurrency_limit', ctypes.c_uint32),
    ('queues', ctypes.c_uint32),
    ('executing', ctypes.c_uint32),
    ('waiting', ctypes.c_uint32),
    ('seats_in_use', ctypes.c_uint64),
    ('seats_waiting', ctypes.c_uint64),
    ('dispatched', ctypes.c_uint64),
    ('rejected_queue_full', ctypes.c_uint64),
    ('rejected_time_out', ctypes.c_uint64),
    ('rejected_cancelled', ctypes.c_uint64),
    ('rejected_concurrency_limit', ctypes.c_uint64),
]

apf_decision._fields_ = [
    ('outcome', ctypes.c_uint32),
    ('reject_reason', ctypes.c_uint32),
    ('request', ctypes.c_uint64),
    ('flow_schema_name', apf_str),
    ('flow_schema_uid', apf_str),
    ('priority_level_name', apf_str),
    ('priority_level_uid', apf_str),
]

apf_workqueue_options._fields_ = [
    ('struct_size', ctypes.c_size_t),
    ('kind', ctypes.c_uint32),
    ('manual_clock', ctypes.c_bool),
    ('name', ctypes.POINTER(ctypes.c_char)),
    ('name_len', ctypes.c_size_t),
    ('limiter', ctypes.POINTER(apf_rate_limiter)),
    ('limiter_state_capacity', ctypes.c_uint64),
    ('limiter_idle_expiry_nanos', ctypes.c_uint64),
    ('capacity', ctypes.c_uint64),
]

apf_workqueue_add_options._fields_ = [
    ('struct_size', ctypes.c_size_t),
    ('after_nanos', ctypes.c_uint64),
    ('rate_limited', ctypes.c_bool),
    ('lane', ctypes.c_uint32),
    ('has_priority', ctypes.c_bool),
    ('priority', ctypes.c_int32),
]

apf_workqueue_item._fields_ = [
    ('result', ctypes.c_uint32),
    ('item', ctypes.c_uint64),
    ('key', ctypes.POINTER(ctypes.c_uint8)),
    ('key_len', ctypes.c_size_t),
    ('lane', ctypes.c_uint32),
    ('priority', ctypes.c_int32),
]

# name: (restype, [(parameter, argtype), ...])
FUNCTIONS = {
    'apf_error_status': (apf_status, [('error', ctypes.POINTER(apf_error))]),
    'apf_error_message': (apf_status, [('error', ctypes.POINTER(apf_error)), ('out_text', ctypes.POINTER(ctypes.POINTER(ctypes.c_char))), ('out_len', ctypes.POINTER(ctypes.c_size_t))]),
    'apf_error_free': (None, [('error', ctypes.POINTER(apf_error))]),
    'apf_adaptive_options_default': (apf_status, [('out', ctypes.POINTER(apf_adaptive_options))]),
    'apf_dispatcher_read_adaptive': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('out', ctypes.POINTER(apf_adaptive_state))]),
    'apf_dispatcher_options_default': (apf_status, [('out', ctypes.POINTER(apf_dispatcher_options))]),
    'apf_dispatcher_new_builtin': (apf_status, [('options', ctypes.POINTER(apf_dispatcher_options)), ('out', ctypes.POINTER(ctypes.POINTER(apf_dispatcher))), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_dispatcher_new_from_config': (apf_status, [('text', ctypes.POINTER(ctypes.c_char)), ('len', ctypes.c_size_t), ('options', ctypes.POINTER(apf_dispatcher_options)), ('out', ctypes.POINTER(ctypes.POINTER(apf_dispatcher))), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_dispatcher_free': (None, [('dispatcher', ctypes.POINTER(apf_dispatcher))]),
    'apf_dispatcher_reconfigure': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('text', ctypes.POINTER(ctypes.c_char)), ('len', ctypes.c_size_t), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_dispatcher_advance_clock': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('nanos', ctypes.c_uint64)]),
    'apf_dispatcher_now': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('out_nanos', ctypes.POINTER(ctypes.c_uint64))]),
    'apf_dispatcher_set_completion_callback': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('callback', apf_completion_callback), ('user', ctypes.c_void_p)]),
    'apf_dispatcher_completion_fd': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('out_fd', ctypes.POINTER(ctypes.c_int))]),
    'apf_dispatcher_take_completion': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('out_request', ctypes.POINTER(ctypes.c_uint64)), ('out_some', ctypes.POINTER(ctypes.c_bool))]),
    'apf_dispatcher_stats_text': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('out', ctypes.POINTER(apf_text))]),
    'apf_dispatcher_config_notices': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('out', ctypes.POINTER(apf_text))]),
    'apf_dispatcher_reject': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('priority_level', ctypes.POINTER(ctypes.c_char)), ('priority_level_len', ctypes.c_size_t), ('flow_schema', ctypes.POINTER(ctypes.c_char)), ('flow_schema_len', ctypes.c_size_t), ('reason', ctypes.c_uint32), ('out_retry_after', ctypes.POINTER(ctypes.c_uint64)), ('out_body', ctypes.POINTER(apf_text))]),
    'apf_dispatcher_observe': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('path', ctypes.POINTER(ctypes.c_char)), ('path_len', ctypes.c_size_t), ('query', ctypes.POINTER(ctypes.c_char)), ('query_len', ctypes.c_size_t), ('out_status', ctypes.POINTER(ctypes.c_uint16)), ('out_content_type', ctypes.POINTER(apf_text)), ('out_body', ctypes.POINTER(apf_text))]),
    'apf_request_info_parse_query': (apf_status, [('method', ctypes.POINTER(ctypes.c_char)), ('method_len', ctypes.c_size_t), ('path', ctypes.POINTER(ctypes.c_char)), ('path_len', ctypes.c_size_t), ('query', ctypes.POINTER(ctypes.c_char)), ('query_len', ctypes.c_size_t), ('out', ctypes.POINTER(apf_request_info)), ('out_name', ctypes.POINTER(apf_text))]),
    'apf_request_info_parse': (apf_status, [('method', ctypes.POINTER(ctypes.c_char)), ('method_len', ctypes.c_size_t), ('path', ctypes.POINTER(ctypes.c_char)), ('path_len', ctypes.c_size_t), ('watch', ctypes.POINTER(ctypes.c_char)), ('watch_len', ctypes.c_size_t), ('out', ctypes.POINTER(apf_request_info))]),
    'apf_start_request_ids': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('digest', ctypes.POINTER(apf_request_digest)), ('estimate', ctypes.POINTER(apf_work_estimate)), ('deadline_nanos', ctypes.c_uint64), ('out', ctypes.POINTER(apf_decision_ids))]),
    'apf_dispatcher_name': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('id', ctypes.c_uint32), ('out_name', ctypes.POINTER(apf_str)), ('out_uid', ctypes.POINTER(apf_str))]),
    'apf_metrics_options_default': (apf_status, [('out', ctypes.POINTER(apf_metrics_options))]),
    'apf_dispatcher_metrics_text_with': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('options', ctypes.POINTER(apf_metrics_options)), ('out', ctypes.POINTER(apf_text)), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_dispatcher_metrics_text': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('out', ctypes.POINTER(apf_text))]),
    'apf_metrics_content_type': (apf_status, [('out_text', ctypes.POINTER(ctypes.POINTER(ctypes.c_char))), ('out_len', ctypes.POINTER(ctypes.c_size_t))]),
    'apf_dispatcher_dump_priority_levels': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('out', ctypes.POINTER(apf_text))]),
    'apf_dispatcher_dump_queues': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('out', ctypes.POINTER(apf_text))]),
    'apf_dispatcher_dump_requests': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('include_details', ctypes.c_bool), ('out', ctypes.POINTER(apf_text))]),
    'apf_queueset_config_default': (apf_status, [('out', ctypes.POINTER(apf_queueset_config))]),
    'apf_queueset_new': (apf_status, [('name', ctypes.POINTER(ctypes.c_char)), ('name_len', ctypes.c_size_t), ('config', ctypes.POINTER(apf_queueset_config)), ('manual_clock', ctypes.c_bool), ('out', ctypes.POINTER(ctypes.POINTER(apf_queueset))), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_queueset_free': (None, [('qs', ctypes.POINTER(apf_queueset))]),
    'apf_queueset_reconfigure': (apf_status, [('qs', ctypes.POINTER(apf_queueset)), ('config', ctypes.POINTER(apf_queueset_config)), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_queueset_start': (apf_status, [('qs', ctypes.POINTER(apf_queueset)), ('flow_hash', ctypes.c_uint64), ('estimate', ctypes.POINTER(apf_work_estimate)), ('deadline_nanos', ctypes.c_uint64), ('tag', ctypes.c_uint32), ('out', ctypes.POINTER(apf_queueset_decision))]),
    'apf_queueset_completion_fd': (apf_status, [('qs', ctypes.POINTER(apf_queueset)), ('out_fd', ctypes.POINTER(ctypes.c_int))]),
    'apf_queueset_take_completion': (apf_status, [('qs', ctypes.POINTER(apf_queueset)), ('out_request', ctypes.POINTER(ctypes.c_uint64)), ('out_some', ctypes.POINTER(ctypes.c_bool))]),
    'apf_queueset_advance_clock': (apf_status, [('qs', ctypes.POINTER(apf_queueset)), ('nanos', ctypes.c_uint64)]),
    'apf_queueset_now': (apf_status, [('qs', ctypes.POINTER(apf_queueset)), ('out_nanos', ctypes.POINTER(ctypes.c_uint64))]),
    'apf_queueset_is_idle': (apf_status, [('qs', ctypes.POINTER(apf_queueset)), ('out_idle', ctypes.POINTER(ctypes.c_bool))]),
    'apf_queueset_read_stats': (apf_status, [('qs', ctypes.POINTER(apf_queueset)), ('out', ctypes.POINTER(apf_queueset_stats))]),
    'apf_queueset_dump_json': (apf_status, [('qs', ctypes.POINTER(apf_queueset)), ('out', ctypes.POINTER(apf_text))]),
    'apf_start_request': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('digest', ctypes.POINTER(apf_request_digest)), ('estimate', ctypes.POINTER(apf_work_estimate)), ('deadline_nanos', ctypes.c_uint64), ('out', ctypes.POINTER(apf_decision))]),
    'apf_request_wait': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('request', ctypes.c_uint64), ('timeout_nanos', ctypes.c_uint64), ('out_outcome', ctypes.POINTER(ctypes.c_uint32)), ('out_reason', ctypes.POINTER(ctypes.c_uint32))]),
    'apf_request_poll': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('request', ctypes.c_uint64), ('out_outcome', ctypes.POINTER(ctypes.c_uint32)), ('out_reason', ctypes.POINTER(ctypes.c_uint32))]),
    'apf_request_cancel': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('request', ctypes.c_uint64), ('out_cancelled', ctypes.POINTER(ctypes.c_bool))]),
    'apf_finish': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('request', ctypes.c_uint64), ('end_nanos', ctypes.c_uint64)]),
    'apf_finish_with_cost': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('request', ctypes.c_uint64), ('end_nanos', ctypes.c_uint64), ('cost', ctypes.c_double)]),
    'apf_request_release_seats': (apf_status, [('dispatcher', ctypes.POINTER(apf_dispatcher)), ('request', ctypes.c_uint64), ('seats', ctypes.c_uint32)]),
    'apf_abi_version': (ctypes.c_uint32, []),
    'apf_status_text': (apf_status, [('status', ctypes.c_uint32), ('out_text', ctypes.POINTER(ctypes.POINTER(ctypes.c_char))), ('out_len', ctypes.POINTER(ctypes.c_size_t))]),
    'apf_text_free': (None, [('text', ctypes.POINTER(apf_text))]),
    'apf_workqueue_options_default': (apf_status, [('out', ctypes.POINTER(apf_workqueue_options))]),
    'apf_workqueue_add_options_default': (apf_status, [('out', ctypes.POINTER(apf_workqueue_add_options))]),
    'apf_workqueue_new': (apf_status, [('options', ctypes.POINTER(apf_workqueue_options)), ('out', ctypes.POINTER(ctypes.POINTER(apf_workqueue))), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_workqueue_free': (None, [('queue', ctypes.POINTER(apf_workqueue))]),
    'apf_workqueue_add': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('key', ctypes.POINTER(ctypes.c_uint8)), ('key_len', ctypes.c_size_t)]),
    'apf_workqueue_add_with_options': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('key', ctypes.POINTER(ctypes.c_uint8)), ('key_len', ctypes.c_size_t), ('opts', ctypes.POINTER(apf_workqueue_add_options))]),
    'apf_workqueue_add_after': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('key', ctypes.POINTER(ctypes.c_uint8)), ('key_len', ctypes.c_size_t), ('delay_nanos', ctypes.c_uint64)]),
    'apf_workqueue_add_rate_limited': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('key', ctypes.POINTER(ctypes.c_uint8)), ('key_len', ctypes.c_size_t)]),
    'apf_workqueue_get': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('timeout_nanos', ctypes.c_uint64), ('out', ctypes.POINTER(apf_workqueue_item))]),
    'apf_workqueue_try_get': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('out', ctypes.POINTER(apf_workqueue_item))]),
    'apf_workqueue_done': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('item', ctypes.c_uint64)]),
    'apf_workqueue_forget': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('key', ctypes.POINTER(ctypes.c_uint8)), ('key_len', ctypes.c_size_t)]),
    'apf_workqueue_num_requeues': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('key', ctypes.POINTER(ctypes.c_uint8)), ('key_len', ctypes.c_size_t), ('out', ctypes.POINTER(ctypes.c_uint32))]),
    'apf_workqueue_len': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('out', ctypes.POINTER(ctypes.c_size_t))]),
    'apf_workqueue_waiting_len': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('out', ctypes.POINTER(ctypes.c_size_t))]),
    'apf_workqueue_lane_len': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('lane', ctypes.c_uint32), ('out', ctypes.POINTER(ctypes.c_size_t))]),
    'apf_workqueue_shut_down': (apf_status, [('queue', ctypes.POINTER(apf_workqueue))]),
    'apf_workqueue_shut_down_with_drain': (apf_status, [('queue', ctypes.POINTER(apf_workqueue))]),
    'apf_workqueue_shutting_down': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('out', ctypes.POINTER(ctypes.c_bool))]),
    'apf_workqueue_advance_clock': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('nanos', ctypes.c_uint64)]),
    'apf_workqueue_metrics_text': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('out', ctypes.POINTER(apf_text))]),
    'apf_workqueue_processing': (apf_status, [('queue', ctypes.POINTER(apf_workqueue)), ('out', ctypes.POINTER(ctypes.c_size_t))]),
    'apf_rate_limiter_new_default': (apf_status, [('out', ctypes.POINTER(ctypes.POINTER(apf_rate_limiter)))]),
    'apf_rate_limiter_new_token_bucket': (apf_status, [('qps', ctypes.c_double), ('burst', ctypes.c_uint32), ('out', ctypes.POINTER(ctypes.POINTER(apf_rate_limiter))), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_rate_limiter_new_item_token_bucket': (apf_status, [('qps', ctypes.c_double), ('burst', ctypes.c_uint32), ('out', ctypes.POINTER(ctypes.POINTER(apf_rate_limiter))), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_rate_limiter_new_exponential': (apf_status, [('base_nanos', ctypes.c_uint64), ('max_nanos', ctypes.c_uint64), ('out', ctypes.POINTER(ctypes.POINTER(apf_rate_limiter))), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_rate_limiter_new_fast_slow': (apf_status, [('fast_nanos', ctypes.c_uint64), ('slow_nanos', ctypes.c_uint64), ('max_fast_attempts', ctypes.c_uint32), ('out', ctypes.POINTER(ctypes.POINTER(apf_rate_limiter))), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_rate_limiter_new_max_of': (apf_status, [('limiters', ctypes.POINTER(ctypes.POINTER(apf_rate_limiter))), ('n', ctypes.c_size_t), ('out', ctypes.POINTER(ctypes.POINTER(apf_rate_limiter))), ('out_error', ctypes.POINTER(ctypes.POINTER(apf_error)))]),
    'apf_rate_limiter_free': (None, [('limiter', ctypes.POINTER(apf_rate_limiter))]),
}


def declare(lib):
    """Set restype and argtypes of every function on a ctypes.CDLL."""
    for name, (restype, params) in FUNCTIONS.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = [t for _, t in params]
    return lib
