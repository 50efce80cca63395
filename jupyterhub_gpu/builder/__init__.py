"""Save a user's environment as an image (issue 14; docs/my-images.md).

The pure parts (:mod:`.validate`, :mod:`.plan`, :mod:`.recipe`, :mod:`.limits`,
:mod:`.stream`) and the edges (:mod:`.records` reads the home, :mod:`.wheelhouse` runs
``pip download`` on the hub, :mod:`.context` writes the build context, :mod:`.probe` and
:mod:`.build` talk to a node's engine). :mod:`.model` holds the data and the errors.
Not yet wired into the hub: the handlers and the spawn form's "My images" come later.
"""
