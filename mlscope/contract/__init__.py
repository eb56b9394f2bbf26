"""mlscope.contract: the ground every part stands on — errors, settings, the evaluation request and
the job a predictor runs, the manifest and its processing steps, queue names, trace levels, scenario
names and statuses. It imports nothing else of mlscope's, and nothing heavier than marshmallow,
numpy and PyYAML: it runs inside slim predictor containers.
"""
