"""The option values of the tasks whose modules import flax, declared without it.

``fedsim.tasks.TaskOptions`` checks its options against them when an experiment is configured,
before any task is built; the task modules re-export them under their own names
(``attack.MODELS``, ``attack_cw.CLASSIFIERS``, ``finetune.SHIFTS``, ``metric_opt.METRICS``).
"""

ATTACK_MODELS = ("cnn", "mlp")  # classifiers of the black-box attack (fedsim.tasks.attack)
ATTACK_CW_CLASSIFIERS = ("mlp", "softmax")  # attacked classifiers of attack_cw (fedsim.tasks.attack_cw)
FINETUNE_SHIFTS = ("flip", "relabel", "none")  # target shifts of finetune (fedsim.tasks.finetune)
OPT_METRICS = ("precision", "recall", "f1", "jaccard")  # metrics of metric_opt (fedsim.tasks.metric_opt)
