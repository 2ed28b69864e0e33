"""The doctor's job: `jsc-compose doctor SPEC` runs the job plan's ``doctor`` script (its set-up,
then the checks of launcher.features.preflight on every node) inside an allocation or as a
short job, and reads the reports (launcher/node/doctor: the checks and the table).
"""
