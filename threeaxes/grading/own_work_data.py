"""Written by `python -m autograder.judging.borrowed` from each drop's grading.json ("exercises"):
what each exercise's answer may not call (threeaxes.grading.own_work).
"""
EXERCISES = {
    'drop01': {
        'training_bytes_answer': {'forbid': ['threeaxes.cost.model_state_bytes', 'threeaxes.cost.bytes_per_param', 'threeaxes.cost.rank_state_bytes'], 'why': 'counts the bytes per parameter that this exercise asks you to count', 'may': 'plain Python arithmetic'},
        'largest_model_answer': {'forbid': ['threeaxes.cost.model_state_bytes', 'threeaxes.cost.bytes_per_param', 'threeaxes.cost.rank_state_bytes', 'threeaxes.grading.visible.load'], 'why': "counts the bytes per parameter that this exercise asks you to count (or reads the answer from the visible check's stored cases)", 'may': 'plain Python arithmetic'},
        'axis_roles_answer': {'forbid': ['threeaxes.grading.visible.load'], 'why': "reads the answer from the visible check's stored cases", 'may': 'the strings listed in the cell'},
    },
    'drop02': {
        'average_gradients_answer': {'forbid': ['threeaxes.data_parallel.average_gradients', 'threeaxes.data_parallel.average_gradients_bucketed'], 'why': 'computes the averaged gradients this exercise asks your function to produce', 'may': 'comms.all_reduce and dims'},
        'dp_bytes_answer': {'forbid': ['threeaxes.cost.model_state_bytes', 'threeaxes.cost.bytes_per_param', 'threeaxes.cost.bytes_sent_per_gpu', 'threeaxes.grading.visible.load'], 'why': "computes the bytes this exercise asks you to count (or reads them from the visible check's stored cases)", 'may': 'the toy model to count its parameters'},
    },
    'drop03': {
        'column_split_answer': {'forbid': ['threeaxes.tensor_parallel.gather_from_tp_region'], 'why': 'puts the column slices of y together, which this exercise asks you to do with comms.all_gather', 'may': 'tensor slicing and comms.all_gather'},
        'tp_block_allreduces_answer': {'forbid': ['threeaxes.grading.drop03.tp_block_collectives'], 'why': 'measures the all-reduces of one tensor-parallel block that this exercise asks you to count', 'may': 'the trace printed above and plain arithmetic'},
    },
    'drop04': {
        'stage_layers_answer': {'forbid': ['threeaxes.pipeline.stages.split_stages'], 'why': 'splits the layers into stages, which is what this exercise asks you to write', 'may': 'plain Python'},
        'bubble_fraction_answer': {'forbid': ['threeaxes.cost.bubble_fraction', 'threeaxes.cost.bubble_overhead', 'threeaxes.pipeline.schedules.Plan.bubble_fraction', 'threeaxes.pipeline.simulate'], 'why': 'is the bubble formula this exercise asks you to write', 'may': 'plain Python arithmetic'},
        'stage0_held_answer': {'forbid': ['threeaxes.cost.in_flight_micro_batches', 'threeaxes.pipeline.peak_in_flight', 'threeaxes.pipeline.simulate'], 'why': 'counts the micro-batches in flight that this exercise asks you to count', 'may': 'plain Python'},
    },
    'drop05': {
        'all_reduce_sizes_answer': {'forbid': ['threeaxes.data_parallel.plan_buckets'], 'why': 'plans the buckets, which is what this exercise asks you to write', 'may': 'plain Python'},
        'first_reduced_answer': {'forbid': ['threeaxes.data_parallel.plan_buckets'], 'why': 'reads the answer off the bucket plan', 'may': 'the trace and the tables printed above'},
        'launch_bucket_answer': {'forbid': ['threeaxes.data_parallel.average_gradients'], 'why': 'averages the gradients over the dp ranks, the work this hook is asked to do', 'may': 'torch and comms.all_reduce'},
    },
    'drop06': {
        'tp_wire_bytes_answer': {'forbid': ['threeaxes.cost.bytes_sent_per_gpu'], 'why': 'computes the bytes on the wire that this exercise asks you to count', 'may': 'plain Python arithmetic'},
        'sp_mlp_answer': {'forbid': ['threeaxes.tensor_parallel.sequence.SequenceParallelMLP.forward', 'threeaxes.tensor_parallel.sequence.SequenceParallelRowLinear.forward'], 'why': 'computes the sequence-parallel MLP this exercise asks you to write', 'may': 'torch and the sequence-parallel regions imported in the cell'},
    },
    'drop07': {
        'predict_answer': {'forbid': ['threeaxes.cost.bubble_fraction', 'threeaxes.cost.bubble_overhead', 'threeaxes.cost.in_flight_micro_batches', 'threeaxes.pipeline.schedules.Plan.bubble_fraction', 'threeaxes.pipeline.simulate', 'threeaxes.pipeline.peak_in_flight'], 'why': 'computes the bubble and the in-flight count this exercise asks you to predict', 'may': 'plain Python arithmetic'},
        'smallest_m_answer': {'forbid': ['threeaxes.cost.bubble_fraction', 'threeaxes.cost.bubble_overhead', 'threeaxes.pipeline.schedules.Plan.bubble_fraction', 'threeaxes.pipeline.simulate'], 'why': 'computes the bubble this exercise asks you to work with', 'may': 'plain Python arithmetic'},
    },
    'drop08': {
        'layout_groups_answer': {'forbid': ['threeaxes.dims.ParallelDims.all_groups', 'threeaxes.cost.group_strides', 'threeaxes.grading.drop08.mesh_layout_groups', 'threeaxes.grading.visible.load'], 'why': "lists the groups of a layout (or reads them from the DeviceMesh, or from the visible check's stored answers), which is what this exercise asks you to work out", 'may': 'plain Python'},
        'collectives_per_step_answer': {'forbid': ['threeaxes.grading.drop08.traced_counts', 'threeaxes.grading.visible.load'], 'why': "measures the counts on real ranks (or reads them from the visible check's stored answers), which is what this exercise asks you to predict", 'may': 'the traces shown above and plain arithmetic'},
    },
    'drop09': {
        'bytes_per_gpu_answer': {'forbid': ['threeaxes.cost.model_state_bytes', 'threeaxes.cost.bytes_per_param', 'threeaxes.cost.rank_state_bytes', 'threeaxes.grading.visible.load'], 'why': "does the ZeRO accounting this exercise asks you to do (or reads the visible check's stored answers)", 'may': 'plain Python arithmetic'},
        'shard_gather_answer': {'forbid': ['threeaxes.grading.visible.load'], 'why': "reads the visible check's stored answers", 'may': 'torch and comms.all_gather'},
    },
    'drop10': {
        'oom_terms_answer': {'forbid': ['threeaxes.cost.activation_bytes', 'threeaxes.cost.model_state_bytes', 'threeaxes.cost.stage_memory', 'threeaxes.cost.llama_layer_bytes', 'threeaxes.cost.plan', 'threeaxes.cost.search'], 'why': 'computes the activation terms this exercise asks you to work out from the formula', 'may': "the model's fields and plain arithmetic"},
        'gb_per_gpu_answer': {'forbid': ['threeaxes.cost.model_state_bytes', 'threeaxes.cost.activation_bytes', 'threeaxes.cost.stage_memory', 'threeaxes.cost.plan', 'threeaxes.cost.search'], 'why': 'computes the memory this exercise asks you to add up', 'may': "the model's fields and plain arithmetic"},
        'fix_config_answer': {'forbid': ['threeaxes.cost.search', 'threeaxes.cost.best_configuration', 'threeaxes.cost.judge'], 'why': 'searches the layouts and returns the best one, which is the choice this exercise asks you to make', 'may': "plan(...) to evaluate a layout you chose, as many as you like, and the notebook's tables"},
    },
    'drop11': {
        'tp_after_answer': {'forbid': ['threeaxes.cost.plan', 'threeaxes.cost.search', 'threeaxes.cost.bytes_sent_per_gpu', 'threeaxes.cost.group_link', 'threeaxes.cost.step_time'], 'why': 'prices the step whose tensor-parallel term this exercise asks you to work out', 'may': 'the numbers printed above and plain arithmetic'},
        'moved_axis_answer': {'forbid': ['threeaxes.cost.group_inside_node', 'threeaxes.cost.network.group_strides', 'threeaxes.cost.group_link'], 'why': 'works out which group stays in a node, the rule this exercise asks you to write', 'may': 'plain Python and the rule in the text'},
        'tp_bytes_answer': {'forbid': ['threeaxes.cost.plan', 'threeaxes.cost.search'], 'why': 'prices the tensor-parallel all-reduces from the bytes this exercise asks you to count', 'may': 'bytes_sent_per_gpu for one all-reduce, and plain arithmetic'},
        'new_layout_answer': {'forbid': ['threeaxes.cost.search', 'threeaxes.cost.best_configuration', 'threeaxes.cost.judge'], 'why': 'searches the layouts and returns the best one, which is the choice this exercise asks you to make', 'may': "plan(...) to evaluate a layout you chose, as many as you like, and the notebook's tables"},
    },
    'drop12': {
        'lever_bubbles_answer': {'forbid': ['threeaxes.cost.bubble_fraction', 'threeaxes.cost.bubble_overhead', 'threeaxes.pipeline.schedules.Plan.bubble_fraction', 'threeaxes.pipeline.simulate', 'threeaxes.cost.plan', 'threeaxes.cost.search', 'threeaxes.cost.best_configuration'], 'why': 'computes the bubbles this exercise asks you to work out', 'may': 'the formulas of drops 4 and 7 and plain arithmetic'},
        'bubble_answer': {'forbid': ['threeaxes.cost.bubble_fraction', 'threeaxes.cost.bubble_overhead', 'threeaxes.pipeline.schedules.Plan.bubble_fraction', 'threeaxes.pipeline.simulate'], 'why': 'is the bubble formula this exercise asks you to write', 'may': 'plain Python arithmetic'},
        'my_config_answer': {'forbid': ['threeaxes.cost.search', 'threeaxes.cost.best_configuration', 'threeaxes.cost.judge'], 'why': 'searches the layouts and returns the best one, which is the choice this exercise asks you to make', 'may': "plan(...) to evaluate a layout you chose, as many as you like, and the notebook's tables"},
    },
    'drop13': {
        'model_parallel_floor_answer': {'forbid': ['threeaxes.cost.model_state_bytes', 'threeaxes.cost.search'], 'why': 'computes the floor, or the model-state bytes behind it, that this exercise asks you to work out', 'may': "the model's and the cluster's fields and plain Python"},
        'my_config_answer': {'forbid': ['threeaxes.cost.plan', 'threeaxes.cost.search', 'threeaxes.cost.best_configuration', 'threeaxes.cost.judge', 'threeaxes.scenarios.drop13.best_for_shape'], 'why': 'evaluates or searches the layouts, which is the choice this exercise asks you to make with the rules and your own numbers', 'may': "the rules, the model's and the cluster's fields and plain Python"},
        'my_defence_answer': {'forbid': ['threeaxes.cost.plan', 'threeaxes.cost.search', 'threeaxes.cost.best_configuration', 'threeaxes.cost.judge', 'threeaxes.cost.violations', 'threeaxes.cost.check_config', 'threeaxes.cost.model_state_bytes', 'threeaxes.cost.bytes_per_param', 'threeaxes.cost.rank_state_bytes', 'threeaxes.cost.stage_memory', 'threeaxes.cost.activation_bytes', 'threeaxes.cost.first_stage_activation_bytes', 'threeaxes.cost.bubble_fraction', 'threeaxes.cost.bubble_overhead', 'threeaxes.cost.bytes_sent_per_gpu', 'threeaxes.scenarios.drop13.best_for_shape'], 'why': 'computes the numbers of the defence, which this exercise asks you to compute with the formulas of earlier drops', 'may': "the model's fields, drop13.RIVALS and plain Python"},
    },
    'drop14': {
        'state_gb_per_gpu_answer': {'forbid': ['threeaxes.cost.model_state_bytes', 'threeaxes.cost.bytes_per_param', 'threeaxes.cost.rank_state_bytes'], 'why': 'does the model-state accounting this exercise asks you to do', 'may': 'plain Python arithmetic'},
        'my_config_answer': {'forbid': ['threeaxes.cost.plan', 'threeaxes.cost.search', 'threeaxes.cost.best_configuration', 'threeaxes.cost.judge', 'threeaxes.scenarios.drop13.best_for_shape'], 'why': 'evaluates or searches the layouts, which is the choice this exercise asks you to make with the rules and your own numbers', 'may': "the rules, the model's and the cluster's fields and plain Python"},
        'my_defence_answer': {'forbid': ['threeaxes.cost.plan', 'threeaxes.cost.search', 'threeaxes.cost.best_configuration', 'threeaxes.cost.judge', 'threeaxes.cost.violations', 'threeaxes.cost.check_config', 'threeaxes.cost.model_state_bytes', 'threeaxes.cost.bytes_per_param', 'threeaxes.cost.rank_state_bytes', 'threeaxes.cost.stage_memory', 'threeaxes.cost.activation_bytes', 'threeaxes.cost.first_stage_activation_bytes', 'threeaxes.cost.bubble_fraction', 'threeaxes.cost.bubble_overhead', 'threeaxes.cost.bytes_sent_per_gpu', 'threeaxes.cost.all_reduce_time', 'threeaxes.scenarios.drop13.best_for_shape'], 'why': 'computes the numbers of the defence, which this exercise asks you to compute with the formulas of earlier drops', 'may': "the model's fields, drop14.RIVALS and plain Python"},
    },
    'drop15': {
        'cp_bytes_answer': {'forbid': ['threeaxes.cost.context_parallel_bytes', 'threeaxes.cost.context_parallel_time', 'threeaxes.cost.bytes_sent_per_gpu'], 'why': 'computes the bytes on the wire that this exercise asks you to count', 'may': 'plain Python arithmetic'},
    },
    'drop16': {
        'moe_bytes_answer': {'forbid': ['threeaxes.expert_parallel.moe_all_to_all_bytes', 'threeaxes.cost.experts.expert_all_to_all_bytes'], 'why': 'computes the all-to-all bytes this exercise asks you to count', 'may': 'plain Python arithmetic (math.ceil) and expert_capacity'},
    },
}
