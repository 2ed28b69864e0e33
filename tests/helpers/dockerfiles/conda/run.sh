#!/bin/sh
exec python "$@"
