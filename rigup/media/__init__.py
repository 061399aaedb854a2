"""The media mode's client side: rigup's ComfyUI workflows run through ComfyUI's own API.

+ workflows.py  the shipped API-format workflows (files/comfyui/workflows) and their parameters
+ comfyui.py    submit to /prompt, follow /ws, read /history: status, outputs, timings
+ websocket.py  the minimal RFC 6455 client /ws needs
+ container.py  PNG size and MP4 tracks of the outputs
+ bench.py      the media rows: FLUX.2 1024x1024 image time, LTX-2.3 clip time
"""
