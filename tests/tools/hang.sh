#!/bin/sh
# Never answers.
exec sleep 3600
