#!/bin/sh
# Echoes its stdin (the args) back.
exec cat
