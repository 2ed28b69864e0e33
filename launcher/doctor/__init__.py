"""The doctor: check every node of an allocation before torch starts (docs/guide/doctor.md).

``node`` and ``report`` are the part that runs on the nodes (standard library only, shipped
as one script by ``ship``); ``ship`` renders the jobscript step; ``run`` is the CLI's side
(inside an allocation, or a short job it submits and waits for).
"""
